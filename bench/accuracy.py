"""Accuracy: the run's diagnosis on a matrix of lab configurations (bench/_accuracy_matrix.py),
each stage reached by several causes and healthy runs at several loads, each with several seeds.

    python bench/accuracy.py [--quick] [--json] [--seeds N] [--only NAME,...] [--through hooks|vllm|real-vllm]
                             [--stress]

`--through vllm` judges each run as `--engine vllm` would a vLLM server: through the engine's vLLM
interfaces only (agent.lab.outside: its /metrics and llm_request spans), and counts how often that
agrees with the hooks' verdict on the same run. `--through real-vllm` runs a real vLLM (its CPU build, `make vllm`)
on the configurations of bench/_real_vllm_matrix.py and diagnoses it with `stagelens diagnose --engine vllm`
(bench/_real_vllm_run.py): healthy must read ok, a fault its root with the flag an expert would change.
`--stress` runs a busy co-runner process on every core during each run (bench/_busy.py), as a noisy host: the
diagnosis must stay as right, and no healthy run may fire.
Under `--stress` a healthy case's open-loop rate is halved, so that it stays within the slowed engine's
capacity (stressed_flags); `healthy_firing_hooks_not` counts the false pages: outside fires, the hooks don't.

Prints the confusion matrix (expected root x diagnosed root), one line per run (so a miss can be read),
then the figures beside their targets. Never pass/fail.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _accuracy_matrix import CASES, MATRIX, QUICK  # noqa: E402  (bench/ is the script's own directory)
from _busy import busy_cores  # noqa: E402  (bench/ is the script's own directory)
from _report import emit  # noqa: E402

from stagelens.lab.scenario_run import run_lab  # noqa: E402
from stagelens.lab.settings import build_configs  # noqa: E402
from stagelens.vocabulary import STAGES  # noqa: E402

NVML_SNAPSHOT = "tests/fixtures/nvml/dgx_a100.json"   # a node to probe on any machine: only the engine is judged
NONE = "none"                  # healthy expected, or all-OK diagnosed
STRESSED_HEALTHY_RATE = 0.5    # a healthy rate's share under --stress: the co-runners take about half the CPU
EXPLODED = 5.0                 # a P99 TTFT this many times the P50 is one no verdict should call OK
TARGETS = {"right_share": ">= 0.95", "right_share_through_vllm": ">= 0.95", "right_share_stressed": ">= 0.90",
           "right_share_real_vllm": ">= 0.95", "healthy_warn_or_firing_runs": "0", "default_diagnose_same": ">= 9/10",
           "healthy_firing_runs": "0", "exploded_but_ok_runs": "0", "cold-start.right": ">= 2/3"}
ROWS = (*STAGES, NONE)
COLUMNS = (*STAGES, NONE, "unknown", "error")


def diagnosed(verdict: str, root: str | None) -> str:
    """The column a run falls in: its root stage, none when all OK, unknown when nothing was judged."""
    if verdict == "unknown":
        return "unknown"
    return root if verdict in ("warn", "firing") and root else NONE


def stressed_flags(case) -> dict:
    """A healthy case is a load within the engine's capacity. The co-runners (one per core) leave the engine about
    half the CPU, so a healthy open-loop rate is halved to stay within it; otherwise the run is not healthy any more
    and the hooks fire on it too. Faults keep their load: less CPU only deepens them."""
    if case.expected is not None or "rate" not in case.flags:
        return case.flags
    return {**case.flags, "rate": case.flags["rate"] * STRESSED_HEALTHY_RATE}


def run_one(case, seed: int, duration: float, through: str = "hooks", stress: bool = False) -> dict:
    flags = stressed_flags(case) if stress else case.flags
    engine_cfg, workload_cfg = build_configs({"duration": duration, "seed": seed}, flags)
    out = {"config": case.name, "seed": seed, "expected": case.expected or NONE}
    outside = through == "vllm"
    try:
        with busy_cores(None if stress else 0):
            result = run_lab(engine_cfg, workload_cfg, interval=1.0, diagnosis_config=None,
                             nvml_snapshot=NVML_SNAPSHOT, outside=outside)
    except Exception as exc:   # noqa: BLE001  one broken configuration must not end the matrix
        return {**out, "diagnosed": "error", "verdict": "error", "root": None, "right": False,
                "error": f"{type(exc).__name__}: {exc}"}
    run, fig = (result.outside if outside else result.run), result.figures
    d = run.diagnosis
    if outside:
        out["hooks_diagnosed"] = diagnosed(result.diagnosis.verdict, result.diagnosis.root_stage)
    label = diagnosed(d.verdict, d.root_stage)
    # healthy is right when no stage fires (a warn is allowed); a fault when its stage is named the root
    right = d.verdict != "firing" if case.expected is None else label == case.expected
    p50, p99 = fig.get("ttft_p50_s"), fig.get("ttft_p99_s")
    return {**out, "diagnosed": label, "verdict": d.verdict, "root": d.root_stage, "right": right,
            "stage_states": {s.stage: s.state for s in d.stages},
            "basis": run.basis if run else None,
            "tail": run.tail.sentence() if run and run.tail else None,
            "tail_shares": run.tail.shares if run and run.tail else {},
            "episodes": [_episode(e) for e in run.episodes] if run else [],
            "at_end": f"{run.at_end.verdict} ({run.at_end.root_stage})" if run else None,
            "ttft_p50_s": p50, "ttft_p99_s": p99, "latency_p99_s": fig.get("latency_p99_s"),
            "requests_finished": fig.get("requests_finished"), "preemptions": fig.get("preemptions"),
            "exploded": bool(p50 and p99 and p99 > EXPLODED * p50)}


def _episode(e) -> str:
    peak = f" peak {e.peak.signal}={e.peak.value:.3g}" if e.peak and e.peak.value is not None else ""
    return f"{e.stage} {e.state} {e.end_unix - e.start_unix:.0f}s{' (open)' if e.open else ''}{peak}"


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:.0f}ms"


def run_line(r: dict) -> str:
    mark = "ok  " if r["right"] else "MISS"
    head = (f"{mark} {r['config']:<20} seed {r['seed']}  expected {r['expected']:<9} diagnosed {r['diagnosed']:<9} "
            f"({r['verdict']})" + (f" hooks: {r['hooks_diagnosed']}" if "hooks_diagnosed" in r else ""))
    if "error" in r:
        return f"{head}  {r['error']}"
    return (f"{head} basis {r['basis']}  TTFT P50 {_ms(r['ttft_p50_s'])} P99 {_ms(r['ttft_p99_s'])}\n"
            f"       tail: {r['tail'] or '-'}")


def miss_detail(r: dict) -> str:
    """What a misdiagnosed run said beyond its verdict: the episodes, the stages and the end's window."""
    states = ", ".join(f"{k} {v}" for k, v in r.get("stage_states", {}).items())
    episodes = "; ".join(r.get("episodes", [])) or "none"
    return f"       stages: {states}; at end: {r.get('at_end')}\n       episodes: {episodes}"


def confusion(runs: list[dict]) -> dict[str, dict[str, int]]:
    table = {row: dict.fromkeys(COLUMNS, 0) for row in ROWS}
    for r in runs:
        table[r["expected"]][r["diagnosed"]] += 1
    return table


def confusion_text(table: dict[str, dict[str, int]]) -> str:
    lines = ["expected \\ diagnosed  " + "".join(f"{c:>10}" for c in COLUMNS)]
    for row in ROWS:
        lines.append(f"{row:<22}" + "".join(f"{table[row][c]:>10}" for c in COLUMNS))
    return "\n".join(lines)


def _real_matrix():
    from _real_vllm_matrix import CASES as REAL_CASES
    from _real_vllm_matrix import MATRIX as REAL_MATRIX
    from _real_vllm_matrix import QUICK as REAL_QUICK

    return REAL_CASES, REAL_QUICK, REAL_MATRIX


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, one configuration per stage and a healthy one")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seeds", type=int, help="seeds per configuration [3; 1 with --quick]")
    parser.add_argument("--only", help="comma-separated configuration names: " + ",".join(CASES))
    parser.add_argument("--through", choices=("hooks", "vllm", "real-vllm"), default="hooks",
                        help="judge through the hooks, through the engine's vLLM interfaces only, or a real vLLM")
    parser.add_argument("--stress", action="store_true", help="a busy co-runner process on every core during each run")
    args = parser.parse_args()
    real = args.through == "real-vllm"
    table_of = _real_matrix() if real else (CASES, QUICK, MATRIX)
    if args.only:
        unknown = [n for n in args.only.split(",") if n not in table_of[0]]
        if unknown:
            parser.error(f"--only: no configuration {', '.join(unknown)} (choose from {', '.join(table_of[0])})")
        cases = [table_of[0][n] for n in args.only.split(",")]
    else:
        cases = [table_of[0][n] for n in table_of[1]] if args.quick else list(table_of[2])
    seeds = args.seeds or (1 if args.quick else 3)
    duration = 12.0 if args.quick else 20.0
    # the table and run lines go to stdout before the figures, or to stderr when stdout is JSON
    out = sys.stderr if args.json else sys.stdout

    started = time.monotonic()
    runs, repeated = [], {}
    if real:
        from _real_vllm_run import WINDOW_S, run_matrix

        runs, repeated = run_matrix(cases, seeds, args.stress)
        duration = WINDOW_S
    for case in [] if real else cases:
        for seed in range(1, seeds + 1):
            r = run_one(case, seed, duration, args.through, args.stress)
            runs.append(r)
            print(run_line(r), file=sys.stderr, flush=True)   # progress: a long matrix shows its misses as it goes
    wall = time.monotonic() - started

    table = confusion(runs)
    print("\nconfusion matrix (runs):\n" + confusion_text(table) + "\n", file=out)
    print("runs:", file=out)
    for r in runs:
        print(run_line(r), file=out)
        if not r["right"]:
            print(miss_detail(r), file=out)
    print(file=out, flush=True)

    healthy = [r for r in runs if r["expected"] == NONE]
    faults = [r for r in runs if r["expected"] != NONE]
    figures: dict = {"through": args.through, "stress_co_runners": os.cpu_count() if args.stress else 0,
                     "runs": len(runs), "configurations": len(cases), "seeds": seeds, "duration_s": duration,
                     "right_runs": sum(r["right"] for r in runs),
                     "right_share": sum(r["right"] for r in runs) / len(runs) if runs else None,
                     "right_share_target": TARGETS["right_share_stressed" if args.stress else
                                                   "right_share" if args.through == "hooks"
                                                   else "right_share_real_vllm" if real
                                                   else "right_share_through_vllm"]}
    for stage in (*STAGES, NONE):
        mine = [r for r in runs if r["expected"] == stage]
        if mine:
            figures[f"{stage}.right_share"] = sum(r["right"] for r in mine) / len(mine)
    figures["fault_runs_right_and_firing"] = sum(r["right"] and r["verdict"] == "firing" for r in faults)
    figures["fault_runs"] = len(faults)
    figures["healthy_firing_runs"] = sum(r["verdict"] == "firing" for r in healthy)
    figures["healthy_firing_runs_target"] = TARGETS["healthy_firing_runs"]
    if args.through == "vllm":   # a false page: outside fires where the hooks, inside the same run, read no fault
        figures["healthy_firing_hooks_not"] = sum(r["verdict"] == "firing" and r.get("hooks_diagnosed") == NONE
                                                  for r in healthy)
    figures["healthy_warn_runs"] = sum(r["verdict"] == "warn" for r in healthy)
    if real:
        figures["healthy_warn_or_firing_runs"] = sum(r["verdict"] in ("warn", "firing") for r in healthy)
        figures["healthy_warn_or_firing_runs_target"] = TARGETS["healthy_warn_or_firing_runs"]
        figures["fault_runs_lever_named"] = sum(bool(r.get("lever_named")) for r in faults)
        for name, rep in repeated.items():
            figures[f"{name}.default_diagnose_same"] = f"{rep['same']}/{rep['of']} {rep['modal']}"
        if repeated:
            figures["default_diagnose_same_target"] = TARGETS["default_diagnose_same"]
    figures["exploded_but_ok_runs"] = sum(r.get("exploded", False) and r["verdict"] == "ok" for r in runs)
    figures["exploded_but_ok_runs_target"] = TARGETS["exploded_but_ok_runs"]
    figures["error_runs"] = sum(r["diagnosed"] == "error" for r in runs)
    if args.through == "vllm":   # the same runs' verdicts through the hooks: how often outside agrees
        figures["agrees_with_hooks"] = sum(r.get("hooks_diagnosed") == r["diagnosed"] for r in runs)
    figures["wall_s"] = wall
    for case in cases:
        mine = [r for r in runs if r["config"] == case.name]
        figures[f"{case.name}.right"] = f"{sum(r['right'] for r in mine)}/{len(mine)}"
    if "cold-start.right" in figures:
        figures["cold-start.right_target"] = TARGETS["cold-start.right"]
    if args.json:
        figures["confusion"] = table
        figures["per_run"] = runs
    emit(figures, args.json)


if __name__ == "__main__":
    main()
