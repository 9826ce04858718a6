"""The tail, explained: of the requests at or past the P99, how much of their time each stage took.

The engine adds up the components of the tail's requests (engine_hooks.records.attribution.tail);
here they are charged to stages (agent.vocabulary), a queue whose reason the engine did not publish
kept apart (neither a stage's nor compute), and judged: a tail is *attributable* when it is slow
against the median and one stage holds most of its time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stagelens.engine_hooks.records.attribution import COMPUTE
from stagelens.engine_hooks.records.snapshot import TailFigures
from stagelens.engine_hooks.records.timeline import QUEUED
from stagelens.vocabulary import COMPONENT_NAMES, STAGE_NAMES, STAGES, stage_of

# the requests' own prefill and decode, and step boundaries: no stage's fault
OWN = COMPUTE
# queue time whose reason the engine did not publish: no stage's, and no compute either
UNEXPLAINED = QUEUED
PARTS = (*STAGES, UNEXPLAINED, OWN)   # what a tail's time is split into
PART_NAMES = {**STAGE_NAMES, UNEXPLAINED: COMPONENT_NAMES[QUEUED], OWN: "compute"}
SLOW_TAIL_FACTOR = 3.0        # a tail this many times the median is one to explain
SLOW_TAIL_FLOOR_S = 0.05      # ... and this long, so a microsecond jitter is never "exploded"
BLAME_SHARE = 0.5             # a stage holding this share of the tail's time explains it


def _part_of(component: str) -> str:
    """The stage a component is charged to; UNEXPLAINED for a queue the engine gave no reason
    for; else OWN."""
    return stage_of(component) or (UNEXPLAINED if component == QUEUED else OWN)


def by_stage(components: dict[str, float] | None) -> dict[str, float]:
    """Seconds by component -> seconds by stage (UNEXPLAINED for a queue without its reason, OWN
    for the requests' own work)."""
    out: dict[str, float] = {}
    for component, s in (components or {}).items():
        key = _part_of(component)
        out[key] = out.get(key, 0.0) + s
    return out


def with_stages(timeline: dict) -> dict:
    """A timeline's dict with its TTFT and latency split by stage beside the components:
    `stage_seconds`."""
    timeline["stage_seconds"] = {metric: by_stage(timeline.get(f"{metric}_components"))
                                 for metric in ("ttft", "latency")}
    return timeline


@dataclass
class Tail:
    metric: str                   # "ttft" or "latency"
    quantile: float
    p50_s: float
    threshold_s: float            # the quantile's value: the tail is the requests at or past it
    requests: int
    of_requests: int
    shares: dict[str, float]      # stage (or UNEXPLAINED, OWN) -> share of the tail's time
    # component -> seconds, summed over the tail
    components: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_figures(cls, metric: str, figures: TailFigures | None) -> Tail | None:
        """From the engine's tail figures (engine_hooks.records.attribution.tail); None when
        there were no requests."""
        if figures is None or not figures.seconds:
            return None
        stages = by_stage(figures.seconds)
        total = sum(stages.values())
        shares = {k: v / total for k, v in stages.items()} if total > 0 else {}
        return cls(metric, figures.quantile, figures.p50_s, figures.threshold_s, figures.requests,
                   figures.of_requests, shares, dict(figures.seconds))

    @property
    def slow(self) -> bool:
        """Slow enough to need explaining: far past the median and not negligible."""
        return self.threshold_s >= max(SLOW_TAIL_FLOOR_S, SLOW_TAIL_FACTOR * self.p50_s)

    def share(self, stage: str) -> float:
        return self.shares.get(stage, 0.0)

    @property
    def blamed(self) -> str | None:
        """The stage that explains a slow tail, or None (a fast tail, or no stage holding most of
        it)."""
        if not self.slow:
            return None
        stage = max(STAGES, key=self.share)
        return stage if self.share(stage) >= BLAME_SHARE else None

    def top_component(self, stage: str) -> str | None:
        parts = {c: s for c, s in self.components.items() if stage_of(c) == stage}
        return max(parts, key=parts.__getitem__) if parts else None

    def sentence(self) -> str:
        """'P99 TTFT 2.36 s (P50 105 ms); of the slowest 1% of requests (3 of 240), 91% of their
        time was cold path (model loads), 6% scheduler, 3% compute'."""
        label = {"ttft": "TTFT", "latency": "latency"}[self.metric]
        head = (f"P{self.quantile * 100:g} {label} {_seconds(self.threshold_s)} (P50 "
                f"{_seconds(self.p50_s)}); of the slowest {100 - self.quantile * 100:g}% of "
                f"requests ({self.requests} of {self.of_requests}), ")
        parts = []
        for key in sorted(self.shares, key=self.shares.__getitem__, reverse=True):
            if self.shares[key] < 0.005:
                continue
            top = self.top_component(key) if key in STAGE_NAMES else None
            parts.append((f"{self.shares[key]:.0%}", PART_NAMES.get(key, key) + (f" ({COMPONENT_NAMES[top]})"
                                                                                  if top else "")))
        if not parts:
            return head + "no time was measured"
        (share, name), rest = parts[0], parts[1:]
        return head + f"{share} of their time was {name}" + "".join(f", {s} {n}" for s, n in rest)

    def to_dict(self) -> dict:
        return {"metric": self.metric, "quantile": self.quantile, "p50_s": self.p50_s,
                "threshold_s": self.threshold_s, "requests": self.requests,
                "of_requests": self.of_requests, "shares": self.shares,
                "components": self.components, "slow": self.slow, "blamed": self.blamed}


def _seconds(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"
