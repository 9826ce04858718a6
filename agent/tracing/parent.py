"""A W3C `traceparent` from the HTTP client → the parent context of the request span."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()


def parent_context(traceparent: str | None, tracestate: str | None = None) -> Context:
    """The remote parent, or an empty context (a new trace) when absent or invalid; never raises."""
    if not traceparent or not isinstance(traceparent, str):
        return Context()
    carrier = {"traceparent": traceparent.strip()}
    if tracestate and isinstance(tracestate, str):
        carrier["tracestate"] = tracestate
    try:
        ctx = _PROPAGATOR.extract(carrier, context=Context())
    except Exception:  # a malformed header must never reach the engine thread
        return Context()
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return Context()
    return ctx
