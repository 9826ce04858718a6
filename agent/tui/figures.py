"""The serving figures the TUI shows and compares before and after a fix, read from one frame's
window and the requests that finished in it."""

from __future__ import annotations

from stagelens import catalogue as c
from stagelens.engine_hooks.records.stats import latency_summary
from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.frame import Frame

# the window's figures the TUI shows, keyed by their snapshot field's name (catalogue.Figure.key)
SHOWN = (c.WAITING, c.RUNNING, c.DECIDED_WAIT_P50, c.DECIDED_WAIT_P99, c.BUSY, c.BUSY_WHILE_WAITING,
         c.BUDGET_USE, c.HEAD_OF_LINE, c.KV_FRAGMENTATION, c.STEP_TIME_INFLATION, c.DECODE_RATE)
# ... and over the requests that finished in it, by the names every surface gives them
# (latency_summary)
FINISHED, TTFT_P50, LATENCY_P99 = "finished", "ttft_p50_s", "latency_p99_s"


def _row(figure: c.Figure, kind: str, lower_better: bool) -> tuple[str, str, str, bool]:
    return figure.label or figure.key or "", figure.key or "", kind, lower_better


# the before/after rows: (label, key, format, lower is better)
COMPARED = (
    ("requests finished", FINISHED, "count", False),
    ("TTFT p50", TTFT_P50, "seconds", True),
    ("latency p99", LATENCY_P99, "seconds", True),
    _row(c.DECIDED_WAIT_P99, "seconds", True),
    _row(c.HEAD_OF_LINE, "ratio", True),
    _row(c.KV_FRAGMENTATION, "ratio", True),
    _row(c.STEP_TIME_INFLATION, "ratio", True),
    _row(c.BUSY_WHILE_WAITING, "pct", False),
    _row(c.DECODE_RATE, "rate", False),
)


def frame_figures(frame: Frame | None, timelines: list[RequestTimeline] = ()) -> dict:
    """Figures of `frame`'s window; TTFT and latency over `timelines` that finished inside it."""
    if frame is None or frame.engine is None:
        return {}
    span = frame.engine.window.span_s or 10.0
    recent = _finished_within(timelines, frame.time_monotonic - span, frame.time_monotonic)
    return {**{figure.key: figure.read(frame.engine) for figure in SHOWN},
            **_shown_latencies(recent), FINISHED: len(recent)}


def period_figures(frames: list[Frame], timelines: list[RequestTimeline] = ()) -> dict:
    """Figures of a period (before or after a fix): each window figure as last known in it, TTFT and
    latency over every request that finished in it."""
    if not frames:
        return {}
    engines = [f.engine for f in reversed(frames) if f.engine is not None]
    out = {figure.key: next((v for engine in engines if (v := figure.read(engine)) is not None), None)
           for figure in SHOWN}
    start, end = frames[0].time_monotonic, frames[-1].time_monotonic
    done = _finished_within(timelines, start, end)
    out.update(_shown_latencies(done))
    out[FINISHED] = len(done)
    return out


def _finished_within(timelines: list[RequestTimeline], start: float, end: float) -> list[RequestTimeline]:
    return [t for t in timelines if t.finished is not None and start <= t.finished <= end]


def _shown_latencies(timelines: list[RequestTimeline]) -> dict:
    """The two the TUI compares, TTFT p50 and latency p99, from the summary every surface uses."""
    summary = latency_summary(ttft=[t.ttft_s for t in timelines if t.ttft_s is not None],
                              latency=[t.latency_s for t in timelines if t.latency_s is not None])
    return {TTFT_P50: summary[TTFT_P50], LATENCY_P99: summary[LATENCY_P99]}
