"""vLLM's per-request `llm_request` OTLP span, emitted by an observer on the bundled engine.

vLLM started with `--otlp-traces-endpoint` (and `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf`)
ends each request with one span (vllm/v1/engine/output_processor.py `do_tracing`): named
`llm_request`, kind SERVER, starting at the request's arrival, with the `gen_ai.*` attributes of
vllm/tracing `SpanAttributes`. `LlmRequestSpans(endpoint)` does the same for the bundled engine,
exporting OTLP/HTTP protobuf through a BatchSpanProcessor on a TracerProvider of its own (never the
global one), resource `service.name=vllm`.

Attributes, as vLLM sets them (seconds for latencies; queue + prefill + decode = e2e):

| attribute | value |
|---|---|
| `gen_ai.request.id` | the request id |
| `gen_ai.response.model` | its model (vLLM V0 set it, V1 does not; kept: the bundled engine serves
  several) |
| `gen_ai.usage.prompt_tokens`, `gen_ai.usage.completion_tokens` | token counts |
| `gen_ai.request.max_tokens`, `.temperature`, `.n` | set only when not 0, as vLLM does (n is 1) |
| `gen_ai.latency.time_in_queue` | arrival to first scheduling |
| `gen_ai.latency.time_to_first_token` | arrival to first token (left out when no token came) |
| `gen_ai.latency.time_in_model_prefill` | first scheduling to first token |
| `gen_ai.latency.time_in_model_decode` | first token to the end |
| `gen_ai.latency.time_in_model_inference` | first scheduling to the end |
| `gen_ai.latency.e2e` | arrival to the end (the span's own duration) |
| `gen_ai.response.finish_reasons` | a JSON list in a string, as vLLM writes it: `["length"]` |

vLLM's V0-only `time_in_scheduler`, `time_in_model_forward` and `time_in_model_execute` are not set
(V1 sets none of them). A request that ended with an error has an ERROR span status. Times: the
engine's monotonic seconds become epoch nanoseconds with one offset taken when the observer is made.

The engine thread only builds the span and hands it to the processor's queue (bounded; full, it
drops): export, retries and a dead endpoint stay on the processor's thread and never block or fail a
step.
"""

from __future__ import annotations

import json
import time
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from stagelens.engine_hooks.records.vllm_names import (
    E2E,
    FINISH_REASONS,
    MAX_TOKENS,
    REQUEST_ID,
    REQUEST_N,
    RESPONSE_MODEL,
    TEMPERATURE,
    TIME_IN_MODEL_DECODE,
    TIME_IN_MODEL_INFERENCE,
    TIME_IN_MODEL_PREFILL,
    TIME_IN_QUEUE,
    TIME_TO_FIRST_TOKEN,
)
from stagelens.engine_hooks.records.vllm_names import LLM_REQUEST as SPAN_NAME
from stagelens.engine_hooks.records.vllm_names import USAGE_COMPLETION_TOKENS as COMPLETION_TOKENS
from stagelens.engine_hooks.records.vllm_names import USAGE_PROMPT_TOKENS as PROMPT_TOKENS

from .metrics import request_phases

TRACES_PATH = "/v1/traces"
INSTRUMENTING_MODULE = "vllm.llm_engine"     # the tracer name vLLM's engine front end uses



def traces_url(endpoint: str) -> str:
    """An OTLP/HTTP endpoint as given, or with `/v1/traces` when it names no path."""
    if not endpoint.startswith(("http://", "https://")):
        raise ValueError(f"the OTLP traces endpoint must be an http(s) URL (OTLP/HTTP protobuf), not {endpoint!r}")
    return endpoint.rstrip("/") + TRACES_PATH if urlsplit(endpoint).path in ("", "/") else endpoint


class LlmRequestSpans:
    """An engine observer exporting one `llm_request` span per request that ends."""

    def __init__(self, endpoint: str, timeout_s: float = 10.0, schedule_delay_s: float = 5.0,
                 max_queue_size: int = 2048) -> None:
        self.endpoint = traces_url(endpoint)
        self._offset_ns = time.time_ns() - time.monotonic_ns()
        self.exporter = OTLPSpanExporter(endpoint=self.endpoint, timeout=timeout_s)
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": "vllm",
                                      "vllm.instrumenting_module_name": INSTRUMENTING_MODULE}),
            shutdown_on_exit=False)
        self.provider.add_span_processor(BatchSpanProcessor(
            self.exporter, max_queue_size=max_queue_size,
            schedule_delay_millis=schedule_delay_s * 1000))
        self.tracer = self.provider.get_tracer(INSTRUMENTING_MODULE)
        self.spans = 0          # handed to the processor
        self._closed = False

    def _epoch_ns(self, monotonic_s: float) -> int:
        return round(monotonic_s * 1e9) + self._offset_ns

    # --- the observer (engine thread) -------------------------------------------------------------
    def on_request_end(self, engine, request) -> None:
        if self._closed:
            return
        phases = request_phases(request)
        attributes = {
            REQUEST_ID: request.request_id,
            RESPONSE_MODEL: request.model,
            PROMPT_TOKENS: request.num_prompt_tokens,
            COMPLETION_TOKENS: len(request.output_token_ids),
            TIME_IN_QUEUE: phases.queue,
            TIME_IN_MODEL_PREFILL: phases.prefill,
            TIME_IN_MODEL_DECODE: phases.decode,
            TIME_IN_MODEL_INFERENCE: phases.inference,
            E2E: phases.e2e,
            FINISH_REASONS: json.dumps([phases.reason]),
            REQUEST_N: 1,
        }
        if phases.first_token is not None:
            attributes[TIME_TO_FIRST_TOKEN] = phases.first_token - phases.arrival
        params = request.params
        if params.max_tokens:
            attributes[MAX_TOKENS] = params.max_tokens
        if params.temperature:
            attributes[TEMPERATURE] = float(params.temperature)
        span = self.tracer.start_span(SPAN_NAME, context=Context(), kind=SpanKind.SERVER,
                                      attributes=attributes,
                                      start_time=self._epoch_ns(phases.arrival))
        if phases.reason == "error":
            span.set_status(Status(StatusCode.ERROR, request.error or "the request failed"))
        span.end(end_time=self._epoch_ns(phases.finished))
        self.spans += 1

    # --- life cycle (any thread) ------------------------------------------------------------------
    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export what is queued now (blocks up to about the exporter's timeout per batch)."""
        return self.provider.force_flush(int(timeout_s * 1000))

    def close(self) -> None:
        """Export what is queued (bounded by the exporter's timeout) and stop the processor's
        thread."""
        if not self._closed:
            self._closed = True
            self.provider.shutdown()
