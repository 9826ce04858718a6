"""Soak: `stagelens serve --engine lab` driven over HTTP at 80% of its knee rate by a seeded mix of
normal, streaming, disconnecting and hostile clients; then requests lost, KV blocks leaked once idle,
requests ended by reason, step errors, RSS growth after warm-up, /metrics latency under load, 4xx by
kind, and the SIGTERM exit.

    python bench/soak.py [--quick] [--json] [--seed N] [--knee-rate R]
    python bench/soak.py --outside [--quick] [--json] [--seed N]

`--outside` soaks `serve --engine vllm` instead, fed by a misbehaving engine, span sender and KV publisher
(bench/soak_outside.py says what each does): RSS against the DaemonSet's limit, /metrics p99, the oldest frame
age, normal spans lost.

The knee rate comes from `bench stress`'s machinery against the same server (rate raised 10% a step
from half the closed-loop capacity) unless --knee-rate gives it. Prints figures; never pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import dataclasses
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HISTORY_FRAMES = 90
sys.path.insert(0, str(ROOT))

import _soak_clients as sc  # noqa: E402  (bench/ is the script's own directory)
from _report import emit  # noqa: E402  (bench/ is the script's own directory)

from stagelens.lab.workload import LengthDist, WorkloadConfig  # noqa: E402
from stagelens.loadtest.http_point import metric_value  # noqa: E402

DGX = str(ROOT / "tests" / "fixtures" / "nvml" / "dgx_a100.json")
MAX_MODEL_LEN = 2048
MAX_NUM_SEQS = 16
# Shares of arrivals; the eight hostile kinds together are 16%.
MIX = {"complete": 0.35, "stream": 0.35, "leave_at_once": 0.07, "stream_leave_after_first": 0.07,
       **{kind: 0.02 for kind in sc.INVALID}}
SOAK_SHARE = 0.8            # of the knee rate
WARM_SHARE = 0.5            # RSS growth is counted from here: the recorder's rings (4096 steps, 2048 timelines)
                            # and the frame history are bounded, and fill in the first minutes
IDLE_WAIT_S = 10.0
RSS_EVERY_S = 2.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when we die, even by SIGKILL (Linux; elsewhere finally must do)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


class Server:
    """`stagelens serve --engine lab` as a child process on a free loopback port."""

    def __init__(self, model: str, workdir: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "serve.log"
        stagelens = str(Path(sys.executable).parent / "stagelens")
        cmd = [stagelens, "--nvml-snapshot", DGX, "serve", "--engine", "lab", "--listen", f"127.0.0.1:{self.port}",
               "--model", model, "--device", "cpu", "--model-dir", str(workdir / "models"), "--interval", "1",
               "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(MAX_NUM_SEQS),
               # a history that fills during the knee search: growth after warm-up is then growth past every
               # bounded buffer (the default 900 frames take 15 minutes to fill)
               "--history", str(HISTORY_FRAMES)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log.open("w"),
                                     env=dict(os.environ, OTEL_TRACES_EXPORTER="none"),
                                     preexec_fn=_die_with_parent if sys.platform == "linux" else None)

    def wait_ready(self, timeout: float = 180.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}:\n{self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                if urllib.request.urlopen(self.url + "/readyz", timeout=1).status == 200:
                    return time.monotonic() - t0
            time.sleep(0.2)
        raise RuntimeError(f"serve not ready after {timeout:.0f} s:\n{self.log.read_text()[-2000:]}")

    def metrics(self) -> str:
        return urllib.request.urlopen(self.url + "/metrics", timeout=10).read().decode()

    def history_figures(self) -> dict:
        """What the sampler's frame history holds now: it fills for its whole length (at --interval 1,
        longer than the soak), so part of the RSS growth is frames kept by design."""
        body = urllib.request.urlopen(self.url + "/api/v1/frames", timeout=30).read()
        frames = json.loads(body)
        return {"frames_kept": len(frames), "frame_json_kb_mean": len(body) / max(1, len(frames)) / 1024}

    def sigterm(self, timeout: float = 30.0) -> tuple[int | None, float]:
        """Exit code (None: killed after `timeout`) and seconds from SIGTERM to exit."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout), time.monotonic() - t0
        except subprocess.TimeoutExpired:
            self.kill()
            return None, time.monotonic() - t0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def workload(rate: float, duration: float, warmup: float, seed: int) -> WorkloadConfig:
    """Short prompts and outputs, so a CPU run sees many requests start and end."""
    return WorkloadConfig(rate=rate, prompt_len=LengthDist("uniform", 16, 96), output_len=LengthDist("uniform", 16, 48),
                          duration=duration, warmup=warmup, seed=seed)


def find_knee_rate(url: str, quick: bool, seed: int) -> dict:
    """`bench stress --vary rate` in process: from half the closed-loop capacity (so the knee is a few
    steps away, not twenty) up in 10% steps to the first confirmed knee."""
    from stagelens.loadtest.http_point import measure_remote
    from stagelens.loadtest.loadgen import LoadOptions
    from stagelens.loadtest.progress import ProgressBar
    from stagelens.loadtest.runner import KneeRule, run_stress
    from stagelens.loadtest.variables import VARIABLES

    calib_s, step_s, warm_s, max_steps = (6.0, 8.0, 2.0, 10) if quick else (10.0, 15.0, 3.0, 12)
    opts = LoadOptions(max_model_len=MAX_MODEL_LEN, request_timeout=60.0, drain_timeout=30.0)
    closed = dataclasses.replace(workload(1.0, calib_s, 1.0, seed), rate=None, concurrency=MAX_NUM_SEQS)
    capacity = measure_remote("closed loop", url, closed, opts).requests / (calib_s - 1.0)
    start = round(max(0.2, capacity / 2), 3)
    bar = ProgressBar("soak: knee search", max_steps)
    try:
        points, knee = run_stress(VARIABLES["rate"], start,
                                  lambda rate: measure_remote(rate, url, workload(rate, step_s, warm_s, seed), opts),
                                  KneeRule(), max_steps, step_s, bar)
    finally:
        bar.close()
    found = knee is not None and knee.index is not None
    return {"closed_loop_rps": capacity, "knee_found": found,
            "knee_rate_rps": points[knee.index].value if found else points[-1].value,
            "knee_reason": knee.reason if knee else f"no knee up to {points[-1].value} req/s",
            "knee_points": len(points)}


def wait_idle(server: Server, since_unix: float, timeout: float) -> tuple[str, float | None]:
    """The last /metrics read, and the seconds until a frame sampled after `since_unix` showed no KV
    block used and no request running or waiting (None: not within `timeout`)."""
    t0 = time.monotonic()
    while True:
        text = server.metrics()
        fresh = (metric_value(text, "stagelens_frame_timestamp_seconds") or 0) > since_unix
        busy = sum(metric_value(text, name) or 0 for name in ("stagelens_kv_cache_used_blocks",
                                                              "stagelens_scheduler_running_requests",
                                                              "stagelens_scheduler_waiting_requests"))
        if fresh and busy == 0:
            return text, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            return text, None
        time.sleep(0.25)


async def soak(server: Server, rate: float, duration: float, seed: int) -> tuple[list, list, tuple]:
    """The client mix, RSS samples of the server every few seconds, and /metrics scraped every second
    from a process of its own; all over the same `duration`."""
    import psutil

    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    scraper = ctx.Process(target=sc.scrape_loop, args=("127.0.0.1", server.port, 1.0, duration, results), daemon=True)
    scraper.start()
    process, rss = psutil.Process(server.proc.pid), []

    async def sample_rss(t0: float) -> None:
        while True:
            rss.append((time.monotonic() - t0, process.memory_info().rss))
            await asyncio.sleep(RSS_EVERY_S)

    sampler = asyncio.create_task(sample_rss(time.monotonic()))
    try:
        cfg = workload(rate, duration, 0.0, seed)
        outcomes = await sc.run_mix("127.0.0.1", server.port, cfg, MIX, MAX_MODEL_LEN, timeout=60.0, drain=60.0)
    finally:
        sampler.cancel()
    try:
        scraped = results.get(timeout=30)
    finally:
        scraper.join(timeout=5)
        if scraper.is_alive():
            scraper.kill()
    return outcomes, rss, scraped


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def client_figures(outcomes: list) -> dict:
    by_kind = {kind: [o for o in outcomes if o.kind == kind] for kind in sc.KINDS}
    lost = [o for o in outcomes if o.lost]
    out: dict = {"requests_sent": len(outcomes)}
    out.update({f"sent.{kind}": len(items) for kind, items in by_kind.items()})
    out["requests_lost"] = len(lost)
    out.update({f"lost.{kind}": n for kind, n in sorted(Counter(o.kind for o in lost).items())})
    if lost:
        out["lost_reasons"] = "; ".join(f"{why} ×{n}" for why, n in Counter(o.lost for o in lost).most_common(4))
    done = [o for o in by_kind["complete"] if o.status == 200 and not o.lost]
    streams = [o for o in by_kind["stream"] if o.status == 200 and not o.lost]
    out["complete_p50_s"] = _pct([o.seconds for o in done], 0.5)
    out["complete_p99_s"] = _pct([o.seconds for o in done], 0.99)
    out["stream_p99_s"] = _pct([o.seconds for o in streams], 0.99)
    out["stream_chunks_mean"] = statistics.fmean(o.chunks for o in streams) if streams else None
    out["finish_reasons_seen"] = " ".join(f"{r}×{n}" for r, n in sorted(Counter(
        o.finish_reason for o in done + streams).items(), key=lambda kv: str(kv[0])))
    out["4xx_on_valid_requests"] = sum(1 for o in outcomes if o.kind in sc.NORMAL + sc.LEAVING
                                       and o.status is not None and 400 <= o.status < 500)
    for kind, expected in sc.INVALID.items():
        statuses = Counter(o.status for o in by_kind[kind])
        out[f"4xx.{kind}"] = " ".join(f"{s}×{n}" for s, n in sorted(statuses.items(), key=lambda kv: str(kv[0])))
        out[f"4xx.{kind}.as_expected"] = bool(by_kind[kind]) and set(statuses) == {expected}
    hostile = [o.seconds for kind in sc.INVALID if kind != "oversized" for o in by_kind[kind] if o.seconds is not None]
    out["invalid_answer_p99_ms"] = _ms(_pct(hostile, 0.99))
    out["invalid_answer_max_ms"] = _ms(max(hostile, default=None))
    out["oversized_answer_max_ms"] = _ms(max((o.seconds for o in by_kind["oversized"] if o.seconds), default=None))
    return out


def server_figures(before: str, after: str, idle_s: float | None, leaving: int) -> dict:
    ended0 = sc.labelled(before, "stagelens_engine_requests_ended_total", "reason")
    ended1 = sc.labelled(after, "stagelens_engine_requests_ended_total", "reason")
    errors0 = sc.labelled(before, "stagelens_engine_step_errors_total", "phase")
    errors1 = sc.labelled(after, "stagelens_engine_step_errors_total", "phase")
    used = metric_value(after, "stagelens_kv_cache_used_blocks")
    stuck = sum(metric_value(after, n) or 0 for n in ("stagelens_scheduler_running_requests",
                                                       "stagelens_scheduler_waiting_requests"))
    out = {"kv_blocks_leaked": used, "requests_stuck_in_engine": stuck,
           "kv_cache_blocks": metric_value(after, "stagelens_kv_cache_blocks"), "idle_after_s": idle_s}
    out.update({f"ended.{r}": ended1[r] - ended0.get(r, 0.0) for r in sorted(ended1)})
    out["abort_per_leaving_client"] = out.get("ended.abort", 0.0) / leaving if leaving else None
    out["step_errors"] = sum(errors1.values()) - sum(errors0.values())
    out.update({f"step_errors.{p}": errors1[p] - errors0.get(p, 0.0) for p in sorted(errors1)
                if errors1[p] > errors0.get(p, 0.0)})
    return out


def rss_figures(rss: list[tuple[float, int]], duration: float) -> dict:
    """Growth from the end of the warm-up share to the end: bounded buffers have filled by then, so what
    grows still is a leak."""
    if not rss:
        return {}

    def at(share: float) -> int:
        return next((b for t, b in rss if t >= share * duration), rss[-1][1])

    mb = 2**20
    return {"rss_start_mb": rss[0][1] / mb, "rss_warm_mb": at(WARM_SHARE) / mb, "rss_end_mb": rss[-1][1] / mb,
            "rss_growth_after_warmup_mb": (rss[-1][1] - at(WARM_SHARE)) / mb,
            "rss_peak_mb": max(b for _, b in rss) / mb, "rss_samples": len(rss)}


def scrape_figures(scraped: tuple[dict[str, list[float]], int]) -> dict:
    latencies, failures = scraped
    metrics, health = latencies.get("/metrics", []), latencies.get("/healthz", [])
    return {"metrics_scrapes": len(metrics), "scrape_failures": failures,
            "metrics_p50_ms": _ms(_pct(metrics, 0.5)), "metrics_p99_ms": _ms(_pct(metrics, 0.99)),
            "metrics_max_ms": _ms(max(metrics, default=None)),
            "healthz_p50_ms": _ms(_pct(health, 0.5)), "healthz_p99_ms": _ms(_pct(health, 0.99))}


def _on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)    # so the finally that stops the server runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 2-minute soak (else 10)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seed", type=int, default=0, help="seeds arrivals, prompts, lengths and the client mix")
    parser.add_argument("--knee-rate", type=float, help="requests/s at the knee: skip the search")
    parser.add_argument("--model", choices=("tiny", "small"), default="small")
    parser.add_argument("--outside", action="store_true", help="soak `serve --engine vllm` fed by a misbehaving "
                        "engine, span sender and KV publisher (bench/soak_outside.py)")
    parser.add_argument("--history", type=int, help="with --outside: the agent's --history (default its own, 900 "
                        "frames: 15 minutes at 1 s to fill, longer than the soak)")
    parser.add_argument("--generator-nice", type=int, help="with --outside: the hostile generator's nice (0: at "
                        "the agent's priority, its own CPU counted in the agent's figures) "
                        "[bench/soak_outside.py's GENERATOR_NICE]")
    parser.add_argument("--seconds", type=float, help="soak this long instead (2 or 10 minutes)")
    args = parser.parse_args()
    duration = args.seconds or (120.0 if args.quick else 600.0)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    if args.outside:
        from soak_outside import run as soak_outside

        emit(soak_outside(duration, args.seed, args.history, args.generator_nice), args.json)
        return
    figures: dict = {"model": args.model, "seed": args.seed, "soak_s": duration}
    with tempfile.TemporaryDirectory(prefix="stagelens-soak-") as workdir:
        server = Server(args.model, Path(workdir))
        try:
            figures["serve_ready_s"] = server.wait_ready()
            if args.knee_rate is None:
                figures.update(find_knee_rate(server.url, args.quick, args.seed))
            else:
                figures.update(knee_found=None, knee_rate_rps=args.knee_rate, knee_reason="given by --knee-rate")
            rate = round(SOAK_SHARE * figures["knee_rate_rps"], 3)
            figures["soak_rate_rps"] = rate
            print(f"soak: knee rate {figures['knee_rate_rps']} req/s ({figures['knee_reason']}); soaking "
                  f"{duration:.0f} s at {rate} req/s", file=sys.stderr, flush=True)
            before, _ = wait_idle(server, time.time(), IDLE_WAIT_S)
            outcomes, rss, scraped = asyncio.run(soak(server, rate, duration, args.seed))
            after, idle_s = wait_idle(server, time.time(), IDLE_WAIT_S)
            figures.update(client_figures(outcomes))
            figures.update(server_figures(before, after, idle_s, sum(1 for o in outcomes if o.kind in sc.LEAVING)))
            figures.update(rss_figures(rss, duration))
            figures.update(scrape_figures(scraped))
            figures.update(server.history_figures())
            code, seconds = server.sigterm()
            figures.update(sigterm_exit_code=code, sigterm_exit_s=seconds)
        finally:
            server.kill()
            log = server.log.read_text(errors="replace") if server.log.exists() else ""
        figures["server_log_tracebacks"] = log.count("Traceback")
        if "Traceback" in log:
            print("soak: the server logged:\n" + log[log.index("Traceback"):][:3000], file=sys.stderr)
    emit(figures, args.json)


if __name__ == "__main__":
    main()
