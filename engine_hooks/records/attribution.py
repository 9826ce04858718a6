"""Where a request's time went: its TTFT and end-to-end latency split into components the engine can
name, so the requests that make the tail can be added up.

Components: every wait reason of the timeline (`no_free_blocks`, `token_budget`, ...
`step_boundary`), `recompute` (prefill run again after a preemption), `load_slowdown` (what the
decode steps it ran in took beyond the usual while a model load ran beside them), and `compute` (the
rest: its own prefill and decode). They add up to the interval. Which stage each one is charged to
is the agent's business.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from stagelens.engine_hooks.records.snapshot import TailFigures
from stagelens.engine_hooks.records.stats import percentile
from stagelens.engine_hooks.records.timeline import RequestTimeline

RECOMPUTE = "recompute"
LOAD_SLOWDOWN = "load_slowdown"
COMPUTE = "compute"


@dataclass(frozen=True)
class SlowStep:
    """A decode step that ran while a model load did, and what it took beyond the usual."""
    start: float
    end: float
    excess_s: float


def components(tl: RequestTimeline, until: float, slow_steps: Iterable[SlowStep] = ()) -> dict[str, float]:
    """Seconds of [arrival, until] by component; they sum to `until - arrival`."""
    out: dict[str, float] = defaultdict(float)
    for w in tl.waits:
        seconds = min(w.end, until) - w.start
        if seconds > 0:
            out[w.reason] += seconds
    preempted = next((t for t, e in tl.events if e == "preempted"), None)
    if preempted is not None:
        for c in tl.chunks:
            if preempted <= c.start < until:
                out[RECOMPUTE] += min(c.end, until) - c.start
    for step in slow_steps:
        if tl.arrival <= step.start and step.end <= until and not _waiting(tl, step):
            out[LOAD_SLOWDOWN] += step.excess_s
    out[COMPUTE] = max(0.0, (until - tl.arrival) - sum(out.values()))
    return {k: v for k, v in out.items() if v > 0}


def _waiting(tl: RequestTimeline, step: SlowStep) -> bool:
    return any(w.start < step.end and step.start < w.end for w in tl.waits)


def tail(timelines: list[RequestTimeline], metric: str = "ttft", quantile: float = 0.99) -> TailFigures | None:
    """The requests at or past the quantile of `metric` ("ttft" or "latency"), their components
    added up; None without requests."""
    rows = [(value, parts) for t in timelines if (value := _value(t, metric)) is not None
            and (parts := getattr(t, f"{metric}_components")) is not None]
    if not rows:
        return None
    values = [v for v, _ in rows]
    threshold, p50 = percentile(values, quantile * 100), percentile(values, 50)
    assert threshold is not None and p50 is not None   # rows is not empty
    seconds: dict[str, float] = defaultdict(float)
    members = [(v, parts) for v, parts in rows if v >= threshold] or [max(rows, key=lambda r: r[0])]
    for _, parts in members:
        for name, s in parts.items():
            seconds[name] += s
    return TailFigures(quantile=quantile, p50_s=p50, threshold_s=threshold,
                       requests=len(members), of_requests=len(rows), seconds=dict(seconds))


def _value(t: RequestTimeline, metric: str) -> float | None:
    end = t.first_token if metric == "ttft" else t.finished
    return end - t.arrival if end is not None else None
