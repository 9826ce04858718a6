"""vLLM's per-request `llm_request` span → a RequestTimeline (the pure part of the OTLP receiver).

vLLM, started with `--otlp-traces-endpoint`, exports one span per finished request: named
`llm_request`, kind SERVER, starting at the request's arrival (Unix epoch), ending when the request
finished, parented to the client's `traceparent`, with `gen_ai.*` attributes (vllm/tracing.py
`SpanAttributes`, set in the output processor's `do_tracing`). What this module reads:

| attribute | type | becomes |
|---|---|---|
| `gen_ai.request.id` | string | `request_id` (else the span id in hex) |
| `gen_ai.response.model` (else `gen_ai.request.model`) | string | `model` (else `unknown`: vLLM V1
  omits it) |
| `gen_ai.usage.prompt_tokens` (else `input_tokens`) | int | `prompt_tokens` (0 when absent) |
| `gen_ai.usage.completion_tokens` (else `output_tokens`) | int | `output_tokens` (0 when absent) |
| `gen_ai.latency.time_in_queue` | int/double s | one `queued` wait from arrival, and the
  `scheduled` event |
| `gen_ai.latency.time_to_first_token` | int/double s | `first_token` = arrival + it |
| `gen_ai.latency.time_in_model_prefill` | int/double s | one prefill chunk after the queue wait |
| `gen_ai.response.finish_reasons` | string array | `finish_reason` (an ERROR span status reads
  `error`) |

vLLM sets no span status and (upstream) no finish reason, so `finish_reason` is usually None. Where
the span names no model, the engine source fills it from its `/metrics` (`with_model`). The span's
own trace id is kept (`trace_id`), so a figure drawn from the request can point at the engine's own
trace. `gen_ai.latency.e2e` and `time_in_model_decode` are not needed: the span's own end is the
finish.

Times: span timestamps are epoch nanoseconds of the engine's host; timelines carry this process's
`time.monotonic()` seconds. `clock_offset` is `time.monotonic() - time.time()` taken once by the
caller, so the conversion is exact only when the engine and the agent share a host clock (the agent
runs beside the engine on its node). Approximations that come from vLLM itself: its queue time runs
from the engine core receiving the request (not the HTTP arrival) to its first scheduling, so the
`queued` wait is placed at arrival and the gap between the frontend and the engine core counts as
compute.

A figure that is absent, of the wrong type, negative, not finite or past the span's end is left
unknown (and named in `problems`); a span without usable start and end times gives None. Nothing
here raises on a span's content.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from stagelens.engine_hooks.records.attribution import components
from stagelens.engine_hooks.records.timeline import QUEUED, PrefillChunk, RequestTimeline, Wait
from stagelens.engine_hooks.records.vllm_names import (
    FINISH_REASONS,
    LLM_REQUEST,
    REQUEST_ID,
    REQUEST_MODEL,
    RESPONSE_MODEL,
    TIME_IN_MODEL_PREFILL,
    TIME_IN_QUEUE,
    TIME_TO_FIRST_TOKEN,
    USAGE_COMPLETION_TOKENS,
    USAGE_INPUT_TOKENS,
    USAGE_OUTPUT_TOKENS,
    USAGE_PROMPT_TOKENS,
)

__all__ = ["LLM_REQUEST", "QUEUED", "timeline_from_span", "with_model"]

UNKNOWN_MODEL = "unknown"

# vLLM's name, then the conventions'
PROMPT_TOKENS = (USAGE_PROMPT_TOKENS, USAGE_INPUT_TOKENS)
COMPLETION_TOKENS = (USAGE_COMPLETION_TOKENS, USAGE_OUTPUT_TOKENS)

# a latency attribute may overshoot the span's own duration by this much (rounding)
_TOLERANCE_S = 1e-3
_MAX_TOKENS = 1 << 40


def timeline_from_span(span: trace_pb2.Span, clock_offset: float,
                       problems: list[str] | None = None) -> RequestTimeline | None:
    """The request an `llm_request` span describes, in this process's monotonic seconds; None
    when it is not an `llm_request` span or its start and end times are unusable. Figures that
    cannot be trusted are left unknown and their attribute named in `problems` (when given)."""
    notes: list[str] = problems if problems is not None else []
    if span.name != LLM_REQUEST:
        return None
    start_ns, end_ns = span.start_time_unix_nano, span.end_time_unix_nano
    if start_ns <= 0 or end_ns < start_ns or not math.isfinite(clock_offset):
        notes.append("span times")
        return None
    arrival = start_ns / 1e9 + clock_offset
    duration = (end_ns - start_ns) / 1e9
    finished = arrival + duration
    attrs = {kv.key: kv.value for kv in span.attributes}

    queue = _seconds(attrs, TIME_IN_QUEUE, duration, notes)
    ttft = _seconds(attrs, TIME_TO_FIRST_TOKEN, duration, notes)
    prefill = _seconds(attrs, TIME_IN_MODEL_PREFILL, duration, notes)
    prompt_tokens = _tokens(attrs, PROMPT_TOKENS, notes)
    output_tokens = _tokens(attrs, COMPLETION_TOKENS, notes)

    tl = RequestTimeline(
        request_id=_string(attrs, REQUEST_ID, notes) or span.span_id.hex(),
        model=_string(attrs, RESPONSE_MODEL, notes) or _string(attrs, REQUEST_MODEL, notes) or UNKNOWN_MODEL,
        prompt_tokens=prompt_tokens or 0,
        output_tokens=output_tokens or 0,
        arrival=arrival,
        finished=finished,
        finish_reason=_finish_reason(span, attrs, notes),
        first_token=arrival + ttft if ttft is not None else None,
        trace_id=_trace_id(span),
    )
    events = [(arrival, "arrival")]
    if queue is not None:
        scheduled = arrival + queue
        events.append((scheduled, "scheduled"))
        if queue > 0:
            tl.waits.append(Wait(start=arrival, end=scheduled, reason=QUEUED))
        if prefill is not None and scheduled + prefill <= finished + _TOLERANCE_S:
            tl.chunks.append(PrefillChunk(start=scheduled, end=scheduled + prefill,
                                          tokens=prompt_tokens or 0, step=0))
    if tl.first_token is not None:
        events.append((tl.first_token, "first_token"))
    events.append((finished, "finished"))
    tl.events = sorted(events, key=lambda e: e[0])
    if tl.first_token is not None:
        tl.ttft_components = components(tl, tl.first_token)
    tl.latency_components = components(tl, finished)
    return tl


def with_model(timelines: list[RequestTimeline], model: str | None) -> list[RequestTimeline]:
    """The timelines, those whose span named no model (vLLM V1 omits it) given `model`: the one
    the engine's `/metrics` names. Copies: the receiver keeps its own as they came."""
    if not model:
        return timelines
    return [dataclasses.replace(t, model=model) if t.model == UNKNOWN_MODEL else t for t in timelines]


def _trace_id(span: trace_pb2.Span) -> str | None:
    """The span's trace id in hex; None where it is not a valid one (16 bytes, not all zero)."""
    return span.trace_id.hex() if len(span.trace_id) == 16 and any(span.trace_id) else None


def _value(attrs: dict[str, common_pb2.AnyValue], key: str) -> tuple[str | None, Any]:
    """The attribute's kind (its AnyValue's oneof) and value, whose type the kind says."""
    v = attrs.get(key)
    if v is None:
        return None, None
    kind = v.WhichOneof("value")
    return kind, getattr(v, kind) if kind else None


def _seconds(attrs: dict[str, common_pb2.AnyValue], key: str, duration: float, notes: list[str]) -> float | None:
    kind, raw = _value(attrs, key)
    if kind is None:
        return None
    if kind not in ("int_value", "double_value"):
        notes.append(key)
        return None
    s = float(raw)
    if not math.isfinite(s) or s < 0 or s > duration + _TOLERANCE_S:
        notes.append(key)
        return None
    return min(s, duration)


def _tokens(attrs: dict[str, common_pb2.AnyValue], keys: tuple[str, ...], notes: list[str]) -> int | None:
    for key in keys:
        kind, raw = _value(attrs, key)
        if kind is None:
            continue
        if kind != "int_value" or not 0 <= raw < _MAX_TOKENS:
            notes.append(key)
            return None
        return int(raw)
    return None


def _string(attrs: dict[str, common_pb2.AnyValue], key: str, notes: list[str]) -> str | None:
    kind, raw = _value(attrs, key)
    if kind is None:
        return None
    if kind != "string_value":
        notes.append(key)
        return None
    return raw or None


def _finish_reason(span: trace_pb2.Span, attrs: dict[str, common_pb2.AnyValue], notes: list[str]) -> str | None:
    if span.status.code == trace_pb2.Status.STATUS_CODE_ERROR:
        return "error"
    kind, raw = _value(attrs, FINISH_REASONS)
    if kind is None:
        return None
    if kind == "string_value":
        return _first_of_json_list(raw) if raw.startswith("[") else raw or None
    if kind == "array_value" and raw.values and raw.values[0].WhichOneof("value") == "string_value":
        return raw.values[0].string_value or None
    notes.append(FINISH_REASONS)
    return None


def _first_of_json_list(text: str) -> str | None:
    """vLLM writes the finish reasons as a JSON list inside a string ('["length"]'): the first of
    them."""
    try:
        reasons = json.loads(text)
    except ValueError:
        return None
    return reasons[0] if isinstance(reasons, list) and reasons and isinstance(reasons[0], str) else None
