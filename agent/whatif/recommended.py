"""`--recommended`: the diagnosis's own fix (agent/lab/fixes.py) for the recorded run, as a
candidate."""

from __future__ import annotations

from stagelens.errors import UserError
from stagelens.whatif.settings import TUNABLE
from stagelens.whatif.workload import Observed


def recommended_changes(observed: Observed, config=None) -> dict:
    from stagelens.diagnosis.whole_run import judge_run
    from stagelens.lab.fixes import fix_flags

    if not observed.frames:
        raise UserError(f"{observed.source}: no frames to diagnose: --recommended needs them")
    run = judge_run(observed.frames, observed.timelines, config)
    changes = {k: v for k, v in fix_flags(run.diagnosis).items() if k in TUNABLE}
    if not changes:
        raise UserError(f"{observed.source}: the diagnosis ({run.diagnosis.verdict}) recommends no "
                        f"change what-if can simulate")
    return changes
