"""`bench/accuracy.py --through real-vllm`: each configuration of bench/_real_vllm_matrix.py on a real vLLM server
(started once per configuration, its seeds one after another), diagnosed from outside by the real CLI while the
load runs, as on-call would: `stagelens diagnose --engine vllm` with the server's traces sent to it.

A run is right when a healthy server reads ok (no warn, no firing) and a fault's root stage is the expected one
with the expected lever among the advice. The standing faults are then diagnosed with the default window
(3 s) ten times under load: how often the verdict is the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _busy import busy_cores  # noqa: E402  (bench/ is the script's own directory)

from tests.helpers import real_vllm
from tests.helpers.prometheus_support import free_port

STAGELENS = str(Path(sys.executable).with_name("stagelens"))
WARMUP_S, WINDOW_S = 3.0, 12.0      # the load runs this long before the diagnosis, which watches this long
STRESSED_HEALTHY_RATE = 0.5         # as bench/accuracy.py: a healthy open load halved beside the co-runners
REPEATS = 10


def run_matrix(cases, seeds: int, stress: bool, repeats: int = REPEATS) -> tuple[list[dict], dict]:
    """(one result a configuration and seed, the default diagnose's repeats on each standing fault)."""
    missing = real_vllm.vllm_missing()
    if missing:
        sys.exit(f"--through real-vllm: {missing}")
    work = Path(tempfile.mkdtemp(prefix="stagelens-real-vllm-"))
    model = real_vllm.make_tiny_model(work / "tiny-llama")
    runs, repeated = [], {}
    for case in cases:
        otlp = free_port()
        server = real_vllm.RealVllm(model, work / f"{case.name}.log", *case.server, "--otlp-traces-endpoint",
                                    f"127.0.0.1:{otlp}", env={"OTEL_EXPORTER_OTLP_TRACES_INSECURE": "true",
                                                              "OTEL_BSP_SCHEDULE_DELAY": "500"})
        try:
            server.start()
        except RuntimeError as exc:
            runs += [_failed(case, seed, f"vLLM did not start: {str(exc)[:300]}") for seed in range(1, seeds + 1)]
            continue
        try:
            for seed in range(1, seeds + 1):
                runs.append(_run(case, seed, server, otlp, stress))
                print(_line(runs[-1]), file=sys.stderr, flush=True)
            if case.expected is not None and repeats and case.name in _standing():
                repeated[case.name] = _repeat(case, server, stress, repeats)
                print(f"     {case.name}: default diagnose x{repeats}: {repeated[case.name]}", file=sys.stderr,
                      flush=True)
        finally:
            server.stop()
    return runs, repeated


def _standing() -> tuple[str, ...]:
    from _real_vllm_matrix import STANDING

    return STANDING


def _load(case, server: real_vllm.RealVllm, seconds: float, seed: int, stress: bool) -> real_vllm.Background:
    if case.load == "closed":
        return real_vllm.Background(real_vllm.closed_loop, server.url, int(case.rate_or_clients), seconds,
                                    _fixed(case.prompt), case.output, seed=seed)
    rate = case.rate_or_clients * (STRESSED_HEALTHY_RATE if stress and case.expected is None else 1.0)
    return real_vllm.Background(real_vllm.open_loop, server.url, rate, seconds, _prompt(case.prompt), case.output,
                                seed=seed)


def _fixed(prompt) -> int:
    return prompt if isinstance(prompt, int) else prompt[0]


def _prompt(prompt):
    if isinstance(prompt, int):
        return prompt
    short, long, share = prompt
    return lambda rng: long if rng.random() < share else short


def diagnose(server: real_vllm.RealVllm, seconds: float | None, otlp: int | None) -> tuple[int, dict | None, str]:
    done = subprocess.run(real_vllm.diagnose_command(STAGELENS, server, seconds, otlp), capture_output=True, text=True,
                          timeout=600)
    try:
        return done.returncode, json.loads(done.stdout), done.stderr
    except json.JSONDecodeError:
        return done.returncode, None, done.stderr


def _run(case, seed: int, server: real_vllm.RealVllm, otlp: int, stress: bool) -> dict:
    out = {"config": case.name, "seed": seed, "expected": case.expected or "none", "lever": case.lever}
    with busy_cores(None if stress else 0), _load(case, server, WARMUP_S + WINDOW_S + 2, seed, stress) as load:
        time.sleep(WARMUP_S)
        code, d, err = diagnose(server, WINDOW_S, otlp)
    time.sleep(2)    # what the load left running finishes before the next run
    if d is None:
        return _failed(case, seed, f"exit {code}: {err.strip()[-300:]}")
    root, verdict = d.get("root_stage"), d["verdict"]
    label = "unknown" if verdict == "unknown" else (root if verdict in ("warn", "firing") and root else "none")
    advice = " | ".join(r for s in d["stages"] for r in s["recommendations"])
    lever_named = case.lever is None or case.lever in advice
    right = verdict == "ok" if case.expected is None else (label == case.expected and lever_named)
    latencies = sorted(load.result.latencies) if load.result else []
    return {**out, "diagnosed": label, "verdict": verdict, "root": root, "right": right, "exit": code,
            "lever_named": lever_named, "advice": advice[:400],
            "stage_states": {s["stage"]: s["state"] for s in d["stages"]},
            "basis": "window", "tail": None, "ttft_p50_s": None, "ttft_p99_s": None,
            "latency_p50_s": latencies[len(latencies) // 2] if latencies else None,
            "requests_finished": load.result.ok if load.result else None,
            "requests_failed": len(load.result.failed) if load.result else None,
            "firing_rows": [e["signal"] for s in d["stages"] for e in s["evidence"] if e["state"] == "firing"]}


def _repeat(case, server: real_vllm.RealVllm, stress: bool, repeats: int) -> dict:
    """The default `diagnose` (3 s, no traces) `repeats` times on the standing fault: how many give the modal
    verdict and root."""
    seen = []
    with busy_cores(None if stress else 0), _load(case, server, WARMUP_S + repeats * 8, 99, stress):
        time.sleep(WARMUP_S)
        for _ in range(repeats):
            _code, d, _err = diagnose(server, None, None)
            seen.append("error" if d is None else f"{d['verdict']} ({d.get('root_stage')})")
    time.sleep(2)
    counts = Counter(seen)
    modal, same = counts.most_common(1)[0]
    return {"modal": modal, "same": same, "of": repeats, "seen": dict(counts)}


def _failed(case, seed: int, why: str) -> dict:
    return {"config": case.name, "seed": seed, "expected": case.expected or "none", "diagnosed": "error",
            "verdict": "error", "root": None, "right": False, "error": why}


def _line(r: dict) -> str:
    mark = "ok  " if r["right"] else "MISS"
    head = f"{mark} {r['config']:<16} seed {r['seed']}  expected {r['expected']:<9} diagnosed {r['diagnosed']:<9}"
    if "error" in r:
        return f"{head} {r['error']}"
    lever = "" if r["lever"] is None else f" lever {'named' if r['lever_named'] else 'MISSING'}"
    return f"{head} ({r['verdict']}, exit {r['exit']}){lever}  firing rows: {', '.join(r['firing_rows']) or '-'}"
