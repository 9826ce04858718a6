"""OTLP/HTTP requests to a receiver: bodies, posting them, vLLM's spans, waiting for the intake."""

from __future__ import annotations

import socket
import time
import urllib.request

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


DEADLINE_S = 5.0


# what vLLM's output processor sets on its `llm_request` span (vllm/tracing.py SpanAttributes)
VLLM_ATTRS = {
    "gen_ai.request.id": "cmpl-1",
    "gen_ai.response.model": "meta-llama/Llama-3.1-8B-Instruct",
    "gen_ai.request.temperature": 0.7,
    "gen_ai.request.top_p": 0.95,
    "gen_ai.request.max_tokens": 64,
    "gen_ai.request.n": 1,
    "gen_ai.usage.prompt_tokens": 512,
    "gen_ai.usage.completion_tokens": 64,
    "gen_ai.latency.time_in_queue": 0.25,
    "gen_ai.latency.time_to_first_token": 0.4,
    "gen_ai.latency.e2e": 1.5,
    "gen_ai.latency.time_in_model_prefill": 0.12,
    "gen_ai.latency.time_in_model_decode": 1.05,
    "gen_ai.latency.time_in_model_inference": 1.17,
}


def vllm_spans(*requests: dict, other: int = 0):
    """Finished SDK spans as vLLM makes them: each request dict overrides VLLM_ATTRS (`start_ns`, `e2e`,
    `status` are not attributes); `other` non-llm_request spans beside them."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "vllm"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("vllm.v1.engine.output_processor")
    context = TraceContextTextMapPropagator().extract({"traceparent": TRACEPARENT})
    now_ns = time.time_ns()
    for i, req in enumerate(requests):
        req = dict(req)
        start_ns = req.pop("start_ns", now_ns - 2_000_000_000 + i * 1_000_000)
        e2e = req.pop("e2e", VLLM_ATTRS["gen_ai.latency.e2e"])
        status = req.pop("status", None)
        attrs = {**VLLM_ATTRS, "gen_ai.latency.e2e": e2e, **req}
        span = tracer.start_span("llm_request", context=context, kind=SpanKind.SERVER, start_time=start_ns,
                                 attributes={k: v for k, v in attrs.items() if v is not None})
        if status is not None:
            span.set_status(status)
        span.end(end_time=start_ns + round(e2e * 1e9))
    for _ in range(other):
        tracer.start_span("POST /v1/completions", context=context, kind=SpanKind.SERVER).end()
    provider.shutdown()
    return memory.get_finished_spans()


def post(url: str, body: bytes, content_type: str = "application/x-protobuf", encoding: str | None = None,
         method: str = "POST") -> tuple[int, str, bytes]:
    headers = {"Content-Type": content_type}
    if encoding:
        headers["Content-Encoding"] = encoding
    req = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=DEADLINE_S) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def wait_for(predicate, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"not within {DEADLINE_S} s: {what}")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_request_body(**override) -> bytes:
    """An ExportTraceServiceRequest (protobuf) with one vLLM llm_request span."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(vllm_spans(override)).SerializeToString()
