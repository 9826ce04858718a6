"""Detection: seconds from fault onset to `firing` at 1 s sampling for each scenario, and false
`firing` samples over a long healthy run.

    python bench/detect.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _report import emit  # noqa: E402  (bench/ is the script's own directory)

from stagelens.diagnosis.evaluate import stage_states  # noqa: E402
from stagelens.lab.scenario_run import run_lab  # noqa: E402
from stagelens.lab.scenarios import SCENARIOS  # noqa: E402
from stagelens.lab.settings import build_configs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of a few minutes")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    duration, healthy_duration = (12.0, 30.0) if args.quick else (20.0, 120.0)
    figures: dict = {"interval_s": 1.0}
    for name, spec in SCENARIOS.items():
        if spec.stage is None:
            continue
        engine_cfg, workload_cfg = build_configs({"duration": duration, "seed": 1}, spec.defaults)
        result = run_lab(engine_cfg, workload_cfg, interval=1.0)
        # The fault is there from the first request: onset is the start of the workload.
        figures[f"{name}.detect_s"] = result.first_firing_s(spec.stage)
        figures[f"{name}.root_stage"] = result.diagnosis.root_stage
    engine_cfg, workload_cfg = build_configs({"duration": healthy_duration, "seed": 7}, SCENARIOS["healthy"].defaults)
    healthy = run_lab(engine_cfg, workload_cfg, interval=1.0)
    states = stage_states(healthy.frames)
    figures["healthy.samples"] = len(states)
    figures["healthy.false_firing_samples"] = sum(1 for _, s in states for state in s.values() if state == "firing")
    figures["healthy.warn_samples"] = sum(1 for _, s in states for state in s.values() if state == "warn")
    emit(figures, args.json)


if __name__ == "__main__":
    main()
