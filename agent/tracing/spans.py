"""One RequestTimeline → one span tree, recorded after the fact with explicit timestamps."""

from __future__ import annotations

from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from stagelens.engine_hooks.records.timeline import RequestTimeline

from . import semconv
from .clock import ClockOffset


def end_time(tl: RequestTimeline) -> float:
    """`finished`, or for a timeline cut short the latest instant it knows of."""
    if tl.finished is not None:
        return tl.finished
    times = [tl.arrival, *(t for t, _ in tl.events), *(c.end for c in tl.chunks),
             *(w.end for w in tl.waits)]
    if tl.first_token is not None:
        times.append(tl.first_token)
    return max(times)


def preempted_intervals(tl: RequestTimeline, end: float) -> Iterator[tuple[float, float]]:
    """Each preempted → resumed interval; a preemption never resumed lasts until `end`."""
    since: float | None = None
    for t, name in sorted(tl.events, key=lambda e: e[0]):
        if name == "preempted" and since is None:
            since = t
        elif name == "resumed" and since is not None:
            yield since, t
            since = None
    if since is not None:
        yield since, end


def record_timeline(tracer: trace.Tracer, tl: RequestTimeline, offset: ClockOffset,
                    parent: Context | None = None) -> trace.Span:
    """Record the tree and return the root span (not recording when sampled out: nothing else is
    made)."""
    ns = offset.to_epoch_ns
    end = end_time(tl)
    root = tracer.start_span(semconv.ROOT, context=parent if parent is not None else Context(),
                             kind=SpanKind.SERVER, attributes=semconv.root_attributes(tl, end),
                             start_time=ns(tl.arrival))
    if not root.is_recording():
        return root
    ctx = trace.set_span_in_context(root, Context())

    def child(name: str, start: float, stop: float, attributes: dict) -> None:
        span = tracer.start_span(name, context=ctx, kind=SpanKind.INTERNAL, attributes=attributes,
                                 start_time=ns(start))
        span.end(end_time=ns(stop))

    for w in tl.waits:
        child(semconv.QUEUE_WAIT, w.start, w.end, semconv.wait_attributes(w))
    for c in tl.chunks:
        child(semconv.PREFILL_CHUNK, c.start, c.end, semconv.chunk_attributes(c))
    if tl.first_token is not None:
        child(semconv.DECODE, tl.first_token, end, {semconv.OUTPUT_TOKENS: tl.output_tokens})
    for i, (start, stop) in enumerate(preempted_intervals(tl, end), 1):
        child(semconv.PREEMPTED, start, stop, {semconv.PREEMPTION_INDEX: i})
    if tl.finish_reason == "error":
        root.set_status(Status(StatusCode.ERROR, "request failed"))
    root.end(end_time=ns(end))
    return root
