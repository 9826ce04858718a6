"""`bench/whatif.py --through real-vllm`: what-if against a real vLLM (the CPU build, tests/helpers/real_vllm.py),
as an operator would use it. A is served and recorded by `stagelens record` from outside (its /metrics and its
llm_request spans); `stagelens whatif --replay A --today ... --set ... --model-config MODEL` predicts each B;
each B is served with its flags on the same arrivals (the same seeded Poisson draws, faster for a rate case)
and recorded the same way, and its figures are measured from its own recording as the prediction's are.

Every B lies past what A ran: a larger batch, an eight-times budget, a load twice A's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import real_vllm
from tests.helpers.prometheus_support import free_port

STAGELENS = str(Path(sys.executable).with_name("stagelens"))
SETTLE_S = 15.0         # after the last arrival: the queue drains and the last spans are exported


@dataclass(frozen=True)
class Load:
    rate: float
    seconds: float
    prompt: int | tuple[int, int, float]       # tokens, or (short, long, share of long)
    output: int


@dataclass(frozen=True)
class B:
    server: tuple[str, ...]       # vLLM's flags for B (A's when the change is the rate)
    set: str | None               # the candidate as `--set` takes it; None: A's flags at a faster rate
    rate_scale: float = 1.0


@dataclass(frozen=True)
class RealWhatIf:
    name: str
    server: tuple[str, ...]
    today: str                     # A's flags as `--today` takes them (vLLM does not publish them)
    load: Load
    cases: tuple[B, ...] = field(default_factory=tuple)


def _cap(n: int) -> tuple[str, ...]:
    return ("--max-num-seqs", str(n), "--max-num-batched-tokens", "2048")


# vLLM's CPU build runs the tiny model's step in ~3 ms: outputs of 256 tokens make two seats serve ~2.5 requests
# a second, so a few a second queue behind them
MATRIX = (
    RealWhatIf("batch-of-2", _cap(2), "max-num-seqs=2,max-num-batched-tokens=2048", Load(4.0, 15, 32, 256),
               (B(_cap(8), "max-num-seqs=8"), B(_cap(16), "max-num-seqs=16"), B(_cap(64), "max-num-seqs=64"))),
    RealWhatIf("budget-128", ("--max-num-seqs", "16", "--max-num-batched-tokens", "128"),
               "max-num-seqs=16,max-num-batched-tokens=128", Load(4.0, 15, (32, 1024, 0.3), 64),
               (B(("--max-num-seqs", "16", "--max-num-batched-tokens", "1024"), "max-num-batched-tokens=1024"),)),
    RealWhatIf("open-rate-2", _cap(64), "max-num-seqs=64,max-num-batched-tokens=2048", Load(2.0, 16, 64, 256),
               (B(_cap(64), None, 2.0), B(_cap(64), None, 4.0))),
    RealWhatIf("batch-of-4-rate-3", _cap(4), "max-num-seqs=4,max-num-batched-tokens=2048", Load(3.0, 16, 64, 256),
               (B(_cap(4), None, 2.0),)),
)


def run(matrix=MATRIX, log=print, keep: str | None = None) -> list[tuple[str, dict, dict]]:
    """(case, predicted figures, measured figures) for each B of each A; with `keep`, the recordings are kept
    in that directory and those already there are reused (the predictions are always made again)."""
    missing = real_vllm.vllm_missing()
    if missing:
        sys.exit(f"--through real-vllm: {missing}")
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="stagelens-whatif-vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    model = real_vllm.make_tiny_model(work / "tiny-llama")
    out = []
    for a in matrix:
        same_server = [b for b in a.cases if b.set is None]
        a_path = work / f"{a.name}-A.jsonl"
        recordings = _serve(model, work, a.name, a.server,
                            [(a_path, 1.0)] + [(work / f"{a.name}-x{b.rate_scale:g}.jsonl", b.rate_scale)
                                               for b in same_server], a.load, log)
        if a_path not in recordings:
            continue
        out.append((f"{a.name}: A from A's spans (fidelity)", _predict(a_path, a.today, model, None, 1.0),
                    _measured(a_path)))
        for b in a.cases:
            label = f"{a.name}: " + (b.set or f"rate x{b.rate_scale:g}")
            if b.set is not None:
                b_path = work / f"{a.name}-{b.set}.jsonl"
                _serve(model, work, f"{a.name}-{b.set}", b.server, [(b_path, 1.0)], a.load, log)
            else:
                b_path = work / f"{a.name}-x{b.rate_scale:g}.jsonl"
            if not b_path.exists():
                continue
            out.append((label, _predict(a_path, a.today, model, b.set, b.rate_scale), _measured(b_path)))
            log(f"{label}: P99 TTFT predicted {_s(out[-1][1].get('ttft_p99_s'))}, measured "
                f"{_s(out[-1][2].get('ttft_p99_s'))}")
    return out


def _serve(model: Path, work: Path, name: str, flags: tuple[str, ...], runs: list[tuple[Path, float]],
           load: Load, log) -> list[Path]:
    """One server with `flags`; each run: the load at `rate_scale` times its rate, recorded to its path (a
    recording already there is kept, and no server started for it)."""
    kept = [path for path, _ in runs if path.exists() and path.stat().st_size]
    runs = [(path, scale) for path, scale in runs if path not in kept]
    if not runs:
        log(f"{name}: reused {', '.join(p.name for p in kept)}")
        return kept
    otlp = free_port()
    server = real_vllm.RealVllm(model, work / f"{name}.log", *flags, "--otlp-traces-endpoint",
                                f"127.0.0.1:{otlp}", env={"OTEL_EXPORTER_OTLP_TRACES_INSECURE": "true",
                                                          "OTEL_BSP_SCHEDULE_DELAY": "500"})
    try:
        server.start()
    except RuntimeError as exc:
        log(f"{name}: vLLM did not start: {str(exc)[:300]}")
        return []
    done = list(kept)
    try:
        for path, scale in runs:
            log(f"{name}: recording {path.name}")
            partial = path.with_suffix(".partial")
            if _record(server, otlp, partial, load, scale):
                partial.replace(path)
                done.append(path)
    finally:
        server.stop()
    return done


def _record(server, otlp: int, path: Path, load: Load, scale: float) -> bool:
    seconds = load.seconds / scale
    command = [STAGELENS, "record", "--out", str(path), "--engine", "vllm", "--engine-url", server.url,
               "--otlp-receiver-grpc", f"127.0.0.1:{otlp}", "--duration", f"{seconds + SETTLE_S + 1:g}"]
    recorder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)         # the receiver listens before the first request
    prompt = load.prompt if isinstance(load.prompt, int) else _mixed(*load.prompt)
    thread = threading.Thread(target=real_vllm.open_loop,
                              args=(server.url, load.rate * scale, seconds, prompt, load.output), kwargs={"seed": 1})
    thread.start()
    thread.join(timeout=seconds + 180)
    _, err = recorder.communicate(timeout=seconds + 120)
    if recorder.returncode != 0:
        print(f"record failed: {err[-1000:]}", file=sys.stderr)
    return recorder.returncode == 0


def _mixed(short: int, long: int, share: float):
    return lambda rng: long if rng.random() < share else short


def _predict(a_path: Path, today: str, model: Path, candidate: str | None, scale: float) -> dict:
    command = [STAGELENS, "whatif", "--replay", str(a_path), "--today", today, "--model-config", str(model),
               "--scale-rate", f"{scale:g}", "--json"] + (["--set", candidate] if candidate else [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        print(f"whatif failed: {done.stderr[-1000:]}", file=sys.stderr)
        return {}
    document = json.loads(done.stdout)
    return (document["candidates"][0]["predicted"] if candidate else document["today"]["predicted"])


def _measured(path: Path) -> dict:
    from stagelens.whatif.figures import serving_figures
    from stagelens.whatif.workload import from_bundle

    observed = from_bundle(str(path))
    return serving_figures(observed.requests, observed.window)


def _s(value) -> str:
    return "-" if value is None else f"{value:.3g} s"
