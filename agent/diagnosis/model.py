"""`Diagnosis`: per stage a state, since when, the evidence, an explanation, what to do, a runbook."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.errors import EXIT_CRITICAL, EXIT_OK, EXIT_UNKNOWN, EXIT_WARNING

STATES = ("unknown", "ok", "warn", "firing")
# A verdict as a monitoring check's exit status; "unknown" (no data) and anything else: UNKNOWN.
VERDICT_EXIT = {"ok": EXIT_OK, "warn": EXIT_WARNING, "firing": EXIT_CRITICAL}
RUNBOOKS = {"kv_cache": "runbooks/KVCacheStageFiring.md", "scheduler": "runbooks/SchedulerStageFiring.md",
            "cold_path": "runbooks/ColdPathStageFiring.md"}


def severity(state: str) -> int:
    return STATES.index(state)


def verdict_exit_code(verdict: str | None) -> int:
    return VERDICT_EXIT.get(verdict, EXIT_UNKNOWN)


@dataclass
class Evidence:
    signal: str
    label: str
    value: float | None
    warn: float | None
    firing: float | None
    unit: str
    window: str
    state: str   # ok | warn | firing; unknown: no data; info: measured but not judged here; ok when not applicable
    applicable: bool = True

    def to_dict(self) -> dict:
        return {"signal": self.signal, "value": self.value, "warn": self.warn, "firing": self.firing,
                "unit": self.unit, "window": self.window, "state": self.state, "label": self.label}


@dataclass
class Recommendation:
    text: str
    flags: dict = field(default_factory=dict)   # engine settings that apply it, for `lab --fixed`


@dataclass
class StageDiagnosis:
    stage: str
    state: str
    since: str | None                     # RFC 3339
    since_unix: float | None
    explanation: str
    evidence: list[Evidence]
    recommendations: list[Recommendation]
    runbook: str
    consequence_of: str | None = None     # the stage whose trouble this one's evidence follows from

    def to_dict(self) -> dict:
        return {"stage": self.stage, "state": self.state, "since": self.since, "explanation": self.explanation,
                "evidence": [e.to_dict() for e in self.evidence],
                "recommendations": [r.text for r in self.recommendations], "runbook": self.runbook,
                "consequence_of": self.consequence_of}


@dataclass
class Diagnosis:
    verdict: str                          # ok | warn | firing | unknown
    root_stage: str | None
    stages: list[StageDiagnosis]
    time_unix: float | None = None
    unavailable: str | None = None        # why there is no verdict (the engine is down, nothing observed)
    disagreement: str | None = None       # the P99 tail blames another stage than the root the signals give

    def stage(self, name: str) -> StageDiagnosis:
        return next(s for s in self.stages if s.stage == name)

    def to_dict(self) -> dict:
        out = {"verdict": self.verdict, "root_stage": self.root_stage, "stages": [s.to_dict() for s in self.stages]}
        if self.unavailable:
            out["unavailable"] = self.unavailable
        if self.disagreement:
            out["disagreement"] = self.disagreement
        return out

    @property
    def exit_code(self) -> int:
        return verdict_exit_code(self.verdict)
