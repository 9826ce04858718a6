"""A node with several engines: each engine's own diagnosis, and the node's verdict, the worst
engine's, saying which.

`NodeDiagnosis.to_dict` is `diagnose --json`'s document when more than one engine is named: the
worst engine's diagnosis at the top (so a reader of one engine's document reads the node's), the
node's fields beside it, and every engine under `engines`. An engine that could not be judged
(down, refused, not that engine) is there with its reason and verdict unknown; it never hides
another's reading, and the node's verdict is the worst of those judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stagelens.diagnosis.model import Diagnosis, severity
from stagelens.vocabulary import exit_code


@dataclass
class EngineDiagnosis:
    name: str                       # unique on the node: as given, else KIND-PORT
    kind: str                       # vllm | sglang
    url: str                        # redacted: never credentials
    diagnosis: Diagnosis | None     # None: not judged (`error` says why)
    error: str | None = None
    gpus: list[str] | None = None   # the GPUs it holds, where known (indexes or UUIDs)
    found: str | None = None        # how it was found: named on the command line, a process, a pod

    @property
    def verdict(self) -> str:
        return "unknown" if self.diagnosis is None else self.diagnosis.verdict

    def to_dict(self) -> dict:
        judged = {"stages": []} if self.diagnosis is None else self.diagnosis.to_dict()
        out = {"name": self.name, "kind": self.kind, "url": self.url, "gpus": self.gpus,
               **judged, "verdict": self.verdict, "root_stage": judged.get("root_stage")}
        if self.error:
            out["error"] = self.error
        if self.found:
            out["found"] = self.found
        return out


@dataclass
class NodeDiagnosis:
    engines: list[EngineDiagnosis]
    notes: list[str] = field(default_factory=list)   # what the node's reading left out, and why

    @property
    def worst(self) -> EngineDiagnosis | None:
        """The engine with the worst judged verdict (the first named among equals); None when
        none was judged."""
        judged = [e for e in self.engines if e.diagnosis is not None and e.verdict != "unknown"]
        return max(judged, key=lambda e: severity(e.verdict), default=None)

    @property
    def verdict(self) -> str:
        worst = self.worst
        return "unknown" if worst is None else worst.verdict

    @property
    def exit_code(self) -> int:
        return exit_code(self.verdict)

    def to_dict(self) -> dict:
        worst = self.worst
        top = {} if worst is None or worst.diagnosis is None else worst.diagnosis.to_dict()
        out = {**top, "verdict": self.verdict, "root_stage": top.get("root_stage"),
               "worst_engine": None if worst is None else worst.name,
               "engines": [e.to_dict() for e in self.engines]}
        if worst is None:
            out["stages"] = []
            out["unavailable"] = "; ".join(f"{e.name}: {e.error or 'not judged'}"
                                           for e in self.engines)
        if self.notes:
            out["notes"] = list(self.notes)
        return out
