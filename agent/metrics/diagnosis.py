"""The diagnosis as metrics: each stage's state, every signal's value (and whether it is a bound),
state and thresholds, the root stage.

States are one gauge per stage, ordered by severity so `>= 1` means warn or worse, `== 2` firing:
unknown -1, ok 0, warn 1, firing 2 (the encoding the alert rules and the dashboard rely on).
"""

from __future__ import annotations

from stagelens import catalogue as c
from stagelens.metrics.families import Scrape


def collect(out: Scrape, frame, diagnosis) -> None:
    if diagnosis is None:
        return
    out.add(c.VERDICT_STATE, c.STATE_VALUES.get(diagnosis.verdict, -1))
    if diagnosis.root_stage:
        out.add(c.ROOT_STAGE, 1, stage=diagnosis.root_stage)
    thresholds: dict[tuple[str, str], float] = {}
    for stage in diagnosis.stages:
        out.add(c.STAGE_STATE, c.STATE_VALUES.get(stage.state, -1), stage=stage.stage)
        out.add(c.STAGE_STATE_SINCE, stage.since_unix, stage=stage.stage)
        for e in stage.evidence:
            out.add(c.SIGNAL_VALUE, e.value, stage=stage.stage, signal=e.signal)
            if e.bound is not None and e.value is not None:
                out.add(c.SIGNAL_BOUND, 1, stage=stage.stage, signal=e.signal, bound=e.bound)
            out.add(c.SIGNAL_STATE, c.STATE_VALUES.get(e.state, -1), stage=stage.stage,
                    signal=e.signal)
            for level, value in (("warn", e.warn), ("firing", e.firing)):
                if value is not None:
                    thresholds[(e.signal, level)] = value
    for (signal, level), value in thresholds.items():
        out.add(c.SIGNAL_THRESHOLD, value, signal=signal, level=level)
