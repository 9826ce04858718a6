"""The diagnosis as metrics: each stage's state, every signal's value (and whether it is a bound), state and
thresholds, the root stage.

States are one gauge per stage, ordered by severity so `>= 1` means warn or worse, `== 2` firing:
unknown -1, ok 0, warn 1, firing 2 (the encoding the alert rules and the dashboard rely on).
"""

from __future__ import annotations

from stagelens.metrics.families import Scrape

STATE_VALUES = {"unknown": -1, "ok": 0, "warn": 1, "firing": 2}
STATE_DOC = "unknown -1, ok 0, warn 1, firing 2"
BOUND_DOC = ("1 where a signal's value (stagelens_signal_value) is a bound of it, not the value itself: bound "
             "at_least or at_most (an engine's coarse histogram places the value only within a bucket).")


def collect(out: Scrape, frame, diagnosis) -> None:
    if diagnosis is None:
        return
    out.gauge("stagelens_diagnosis_verdict_state", f"The worst stage state ({STATE_DOC}).",
              STATE_VALUES.get(diagnosis.verdict, -1))
    if diagnosis.root_stage:
        out.gauge("stagelens_root_stage_info", "1 for the stage the diagnosis names as the root of the chain.",
                  1, stage=diagnosis.root_stage)
    thresholds: dict[tuple[str, str], float] = {}
    for stage in diagnosis.stages:
        out.gauge("stagelens_stage_state", f"State of the bottleneck stage ({STATE_DOC}).",
                  STATE_VALUES.get(stage.state, -1), stage=stage.stage)
        out.gauge("stagelens_stage_state_since_timestamp_seconds", "When the stage entered its current state.",
                  stage.since_unix, stage=stage.stage)
        for e in stage.evidence:
            out.gauge("stagelens_signal_value", "Value of a stage signal over the diagnosis window.",
                      e.value, stage=stage.stage, signal=e.signal)
            if e.bound is not None and e.value is not None:
                out.gauge("stagelens_signal_bound_info", BOUND_DOC, 1, stage=stage.stage, signal=e.signal,
                          bound=e.bound)
            out.gauge("stagelens_signal_state", f"State of a stage signal ({STATE_DOC}).",
                      STATE_VALUES.get(e.state, -1), stage=stage.stage, signal=e.signal)
            for level, value in (("warn", e.warn), ("firing", e.firing)):
                if value is not None:
                    thresholds[(e.signal, level)] = value
    for (signal, level), value in thresholds.items():
        out.gauge("stagelens_signal_threshold", "The agent's threshold of a signal for a level (warn, firing).",
                  value, signal=signal, level=level)
