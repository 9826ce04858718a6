"""One measured point of a curve: the load or setting, the serving figures, and the stages that
fired."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

NO_STAGE = "none"
UNKNOWN = "unknown"


@dataclass
class Point:
    # the swept setting or load at this point (number, bool or name)
    value: object
    # output tokens made inside the recorded window, per second
    throughput_tokens_per_s: float = 0.0
    latency_p50_s: float | None = None
    latency_p99_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    # requests that arrived in the recorded window and finished
    requests: int = 0
    requests_failed: int = 0
    # engine busy (or GPU util) over the recorded window; None unknown
    engine_busy_ratio: float | None = None
    verdict: str = "unknown"                   # the diagnosis at the end of the point
    root_stage: str | None = None
    firing_stages: list[str] = field(default_factory=list)
    warn_stages: list[str] = field(default_factory=list)
    # stage -> the diagnosis's one sentence, where not ok
    explanations: dict = field(default_factory=dict)
    # further figures (preemptions, scheduler wait p99, ...)
    extra: dict = field(default_factory=dict)

    @property
    def stage(self) -> str:
        """The stage that fired here: the root stage when it fires, else the first firing one;
        `none` when nothing fired, `unknown` when there was no diagnosis."""
        if self.root_stage and self.root_stage in self.firing_stages:
            return self.root_stage
        if self.firing_stages:
            return self.firing_stages[0]
        return UNKNOWN if self.verdict == UNKNOWN else NO_STAGE

    def p99(self, metric: str = "latency") -> float | None:
        return self.ttft_p99_s if metric == "ttft" else self.latency_p99_s

    def to_dict(self) -> dict:
        out = asdict(self)
        out["stage"] = self.stage
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Point:
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or "value" not in data:
            raise ValueError("a point must be an object with a 'value'")
        return cls(**{k: v for k, v in data.items() if k in names})


def with_diagnosis(point: Point, diagnosis: dict | None) -> Point:
    """Fill the point's verdict and stages from a `diagnose --json` document (None: unknown)."""
    if not diagnosis:
        return point
    point.verdict = diagnosis.get("verdict") or "unknown"
    point.root_stage = diagnosis.get("root_stage")
    stages = diagnosis.get("stages") or []
    point.firing_stages = [s["stage"] for s in stages if s.get("state") == "firing"]
    point.warn_stages = [s["stage"] for s in stages if s.get("state") == "warn"]
    point.explanations = {s["stage"]: s.get("explanation", "") for s in stages if s.get("state") in ("warn", "firing")}
    return point
