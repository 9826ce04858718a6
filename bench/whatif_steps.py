"""The step cost carried from one run to another: fitted on each recording of a `bench/whatif.py --keep DIR`, it
prices the steps of every other recording of the same scenario (its twin, its candidates, its faster rates), which
is most of what bench/whatif.py's errors are made of, and does so step by step rather than through a P50 of 30
requests. With and without the cold-prefill term (agent/whatif/fit.py), on the same pairs.

    python bench/whatif_steps.py DIR [--json]

Per pair (A fitted, B priced): the median |error| of B's steps, the median error of B's prefill steps (their
bias: what moves TTFT), and the error on B's busy time (what moves the queueing); each figure is the median
over all pairs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _report import emit  # noqa: E402  (bench/ is the script's own directory)

from stagelens.whatif.fit import FEATURES, StepCost, fit_steps, step_rows  # noqa: E402
from stagelens.whatif.workload import from_bundle  # noqa: E402


def scenario_of(path: Path) -> str:
    """bench/whatif.py names a recording `{scenario}-{digest}-{hooks|outside}-{twin}.jsonl`."""
    return path.stem.rsplit("-", 3)[0]


def carried(cost: StepCost, steps: list[dict]) -> tuple[float, float, float]:
    """(median |step error|, median prefill-step error, busy-time error) of `cost` on `steps`."""
    x, y = step_rows(steps, cold_after=cost.cold_after_s)
    predicted = x @ np.array([cost.coefficients[name] for name in FEATURES])
    error = (predicted - y) / y
    prefills = x[:, FEATURES.index("prefill_tokens")] > 0
    return (float(np.median(np.abs(error))), float(np.median(error[prefills])) if prefills.any() else 0.0,
            float(predicted.sum() / y.sum() - 1))


def measure(recordings: dict[str, list[list[dict]]], sequential: bool) -> dict:
    steps_error, prefill_bias, busy_error = [], [], []
    for runs in recordings.values():
        costs = [fit_steps(steps, sequential=sequential) for steps in runs]
        for i, cost in enumerate(costs):
            for j, steps in enumerate(runs):
                if i != j:
                    step, prefill, busy = carried(cost, steps)
                    steps_error.append(step)
                    prefill_bias.append(abs(prefill))
                    busy_error.append(abs(busy))
    return {"pairs": len(steps_error), "median_abs_step_error": statistics.median(steps_error),
            "median_abs_prefill_bias": statistics.median(prefill_bias),
            "median_abs_busy_time_error": statistics.median(busy_error)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="a `bench/whatif.py --keep` directory")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    recordings: dict[str, list[list[dict]]] = {}
    for path in sorted(Path(args.dir).glob("*-hooks-*.jsonl")):
        recordings.setdefault(scenario_of(path), []).append(from_bundle(str(path)).steps)
    if not recordings:
        raise SystemExit(f"bench/whatif_steps.py: no recordings of bench/whatif.py --keep in {args.dir}")
    figures = {"scenarios": len(recordings), "recordings": sum(len(r) for r in recordings.values())}
    for name, sequential in (("with_cold_prefill", True), ("without_cold_prefill", False)):
        figures |= {f"{name}_{key}": value for key, value in measure(recordings, sequential).items()}
    emit(figures, args.json)


if __name__ == "__main__":
    main()
