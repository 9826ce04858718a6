"""`Diagnosis`: per stage a state, since when, the evidence, an explanation, what to do, a runbook.

`to_dict` is the `diagnose --json` document (and `GET /api/v1/diagnosis`); `from_dict` reads it
back.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal, overload

from stagelens.numbers import is_finite_number, shown
from stagelens.vocabulary import STATES, exit_code

EVIDENCE_STATES = (*STATES, "info")   # info: measured, shown, not judged here
# Where a signal's value came from: measured (hooks, NVML, the host), inferred from what an engine
# read from outside publishes (`how` says from what), or not observable on that engine.
PROVENANCES = ("measured", "inferred", "not observable")
# A value known only within bounds (an engine's coarse histogram) is shown as the bound that decided
# its state.
BOUNDS = ("at_least", "at_most")


def severity(state: str) -> int:
    return STATES.index(state)


class DiagnosisError(ValueError):
    """A diagnosis document that cannot be read back; the message names the field
    (`stages[1].evidence[0].value`)."""


@dataclass
class Evidence:
    signal: str
    label: str
    value: float | None
    warn: float | None
    firing: float | None
    unit: str
    window: str
    # ok | warn | firing; unknown: no data; info: measured but not judged here; ok when not
    # applicable
    state: str
    applicable: bool = True
    provenance: str | None = None   # one of PROVENANCES; None: no data at all (no engine, no GPU)
    how: str | None = None          # for an inferred value: from what, with the numbers
    # one of BOUNDS: `value` is that bound, not the value itself; None: the value
    bound: str | None = None

    def to_dict(self) -> dict:
        return {"signal": self.signal, "value": self.value, "warn": self.warn,
                "firing": self.firing, "unit": self.unit, "window": self.window,
                "state": self.state, "label": self.label, "provenance": self.provenance,
                "how": self.how, "bound": self.bound}

    @classmethod
    def from_dict(cls, data, where: str = "evidence") -> Evidence:
        f = _Fields(data, where)
        provenance = f.one_of("provenance", PROVENANCES, nullable=True, absent=True)
        return cls(f.string("signal"), f.string("label"), f.number("value"), f.number("warn"),
                   f.number("firing"), f.string("unit"), f.string("window"),
                   f.one_of("state", EVIDENCE_STATES), provenance=provenance,
                   how=f.string("how", nullable=True, absent=True),
                   bound=f.one_of("bound", BOUNDS, nullable=True, absent=True))


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
        return {"stage": self.stage, "state": self.state, "since": self.since,
                "explanation": self.explanation, "evidence": [e.to_dict() for e in self.evidence],
                "recommendations": [r.text for r in self.recommendations], "runbook": self.runbook,
                "consequence_of": self.consequence_of}

    @classmethod
    def from_dict(cls, data, where: str = "stage") -> StageDiagnosis:
        """The inverse of `to_dict`: what it leaves out (the recommendations' flags) stays empty."""
        f = _Fields(data, where)
        since = f.string("since", nullable=True)
        return cls(f.string("stage"), f.one_of("state", STATES), since, f.time(since, "since"),
                   f.string("explanation"), f.items("evidence", Evidence.from_dict),
                   [Recommendation(text) for text in f.items("recommendations", _string)],
                   f.string("runbook"), f.string("consequence_of", nullable=True))


@dataclass
class Diagnosis:
    verdict: str                          # ok | warn | firing | unknown
    root_stage: str | None
    stages: list[StageDiagnosis]
    time_unix: float | None = None
    # why there is no verdict (the engine is down, nothing observed)
    unavailable: str | None = None
    # the P99 tail blames another stage than the root the signals give
    disagreement: str | None = None
    # an engine read from outside, as detected ("vLLM V1 (0.10-style names)")
    engine: str | None = None

    def stage(self, name: str) -> StageDiagnosis:
        return next(s for s in self.stages if s.stage == name)

    def to_dict(self) -> dict:
        out = {"verdict": self.verdict, "root_stage": self.root_stage,
               "stages": [s.to_dict() for s in self.stages]}
        if self.unavailable:
            out["unavailable"] = self.unavailable
        if self.disagreement:
            out["disagreement"] = self.disagreement
        if self.engine:
            out["engine"] = self.engine
        return out

    @classmethod
    def from_dict(cls, data) -> Diagnosis:
        """A diagnosis read back from `to_dict`'s document (a server's answer); DiagnosisError
        naming the field that is not as `to_dict` writes it. Fields it does not know are left
        aside (a newer agent's)."""
        f = _Fields(data, "")
        return cls(f.one_of("verdict", STATES), f.string("root_stage", nullable=True),
                   f.items("stages", StageDiagnosis.from_dict),
                   unavailable=f.string("unavailable", nullable=True, absent=True),
                   disagreement=f.string("disagreement", nullable=True, absent=True),
                   engine=f.string("engine", nullable=True, absent=True))

    @property
    def exit_code(self) -> int:
        return exit_code(self.verdict)


class _Fields:
    """One JSON object's fields, each checked as it is read; an error names the field by its
    path."""

    def __init__(self, data, where: str) -> None:
        if not isinstance(data, dict):
            raise DiagnosisError(f"{where or 'a diagnosis'}: must be an object, got {shown(data)}")
        self.data, self.where = data, where

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _get(self, key: str, ok, what: str, nullable: bool = False, absent: bool = False):
        if key not in self.data:
            if absent:
                return None
            raise DiagnosisError(f"{self._path(key)}: missing")
        value = self.data[key]
        if not (ok(value) or (nullable and value is None)):
            what += " or null" if nullable else ""
            raise DiagnosisError(f"{self._path(key)}: must be {what}, got {shown(value)}")
        return value

    # a field neither nullable nor allowed absent reads as its value or raises
    @overload
    def string(self, key: str, nullable: Literal[False] = False, absent: Literal[False] = False) -> str: ...
    @overload
    def string(self, key: str, nullable: bool = False, absent: bool = False) -> str | None: ...

    def string(self, key: str, nullable: bool = False, absent: bool = False) -> str | None:
        return self._get(key, lambda v: isinstance(v, str), "a string", nullable, absent)

    def number(self, key: str) -> float | None:
        return self._get(key, is_finite_number, "a finite number", nullable=True)

    @overload
    def one_of(self, key: str, choices: tuple[str, ...], nullable: Literal[False] = False,
               absent: Literal[False] = False) -> str: ...
    @overload
    def one_of(self, key: str, choices: tuple[str, ...], nullable: bool = False,
               absent: bool = False) -> str | None: ...

    def one_of(self, key: str, choices: tuple[str, ...], nullable: bool = False,
               absent: bool = False) -> str | None:
        return self._get(key, lambda v: isinstance(v, str) and v in choices, f"one of {', '.join(choices)}",
                         nullable, absent)

    def items(self, key: str, read) -> list:
        """A list whose items are each `read(item, path)`."""
        value = self._get(key, lambda v: isinstance(v, list), "a list")
        return [read(item, f"{self._path(key)}[{i}]") for i, item in enumerate(value)]

    def time(self, text: str | None, key: str) -> float | None:
        """An RFC 3339 time (as `since` is written) in seconds since 1970."""
        if text is None:
            return None
        try:
            t = dt.datetime.fromisoformat(text)
        except ValueError:
            t = None
        if t is None or t.tzinfo is None:
            raise DiagnosisError(f"{self._path(key)}: must be an RFC 3339 time with its offset, got {shown(text)}")
        return t.timestamp()


def _string(value, where: str) -> str:
    """A list item that must be a string."""
    if not isinstance(value, str):
        raise DiagnosisError(f"{where}: must be a string, got {shown(value)}")
    return value
