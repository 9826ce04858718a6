"""The real OTLP exporters against real local receivers: HTTP (protobuf) and gRPC, live, slow and dead."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from stagelens.tracing import TraceExporter
from tests.helpers.tracing_support import (
    OFFSET,
    OtlpHttpReceiver,
    clear_otel_env,
    closed_port,
    otlp_attributes,
    otlp_grpc_receiver,
    otlp_spans,
    preempted_timeline,
    small_timeline,
)

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clear_otel_env(monkeypatch)


@pytest.fixture
def receiver():
    r = OtlpHttpReceiver()
    yield r
    r.close()


def check_received(spans, trace_id: str) -> None:
    names = sorted(span.name for span, _ in spans)
    assert names == sorted(["llm_request", "queue_wait", "queue_wait", "queue_wait", "prefill_chunk",
                            "prefill_chunk", "prefill_chunk", "decode", "preempted"])
    root, resource = next((s, r) for s, r in spans if s.name == "llm_request")
    assert resource["service.name"] == "stagelens"
    assert root.trace_id.hex() == trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert root.parent_span_id.hex() == "b7ad6b7169203331"
    assert root.kind == root.SPAN_KIND_SERVER
    assert root.start_time_unix_nano == OFFSET.to_epoch_ns(100.0)
    assert root.end_time_unix_nano == OFFSET.to_epoch_ns(100.5)
    a = otlp_attributes(root)
    assert a["gen_ai.request.id"] == "req-1"
    assert a["gen_ai.usage.input_tokens"] == 512 and a["gen_ai.usage.output_tokens"] == 64
    assert a["gen_ai.operation.name"] == "text_completion"
    assert a["gen_ai.latency.time_in_queue"] == pytest.approx(0.13)
    assert a["stagelens.wait_s.behind_long_prefill"] == pytest.approx(0.02)
    assert a["gen_ai.response.finish_reasons"] == ["length"]
    for span, _ in spans:
        if span.name != "llm_request":
            assert span.parent_span_id == root.span_id
    held = next(s for s, _ in spans if s.name == "queue_wait" and otlp_attributes(s).get("stagelens.wait.step") == 7)
    assert otlp_attributes(held)["stagelens.wait.held_by"] == "req-long"


def test_otlp_http_to_a_real_receiver(receiver):
    registry = CollectorRegistry()
    exporter = TraceExporter.from_env({"exporter": "otlp-http", "endpoint": receiver.base_url},
                                      registry=registry, offset=OFFSET)
    try:
        trace_id = exporter.export_timeline(preempted_timeline(), traceparent=TRACEPARENT)
        assert exporter.flush(5)
    finally:
        exporter.shutdown()
    assert receiver.paths == ["/v1/traces"]
    check_received(otlp_spans(receiver.requests), trace_id)
    assert exporter.stats()["exported"] == 9 and exporter.stats()["failed"] == 0
    assert registry.get_sample_value("stagelens_trace_spans_exported_total", {"exporter": "otlp-http"}) == 9


def test_otlp_http_endpoint_from_env(receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base_url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gpu-node-7")
    exporter = TraceExporter.from_env(offset=OFFSET)
    try:
        assert exporter.name == "otlp-http"
        exporter.export_timeline(small_timeline("r1"))
        assert exporter.flush(5)
    finally:
        exporter.shutdown()
    spans = otlp_spans(receiver.requests)
    assert receiver.paths == ["/v1/traces"] and len(spans) == 4
    assert {r["service.name"] for _, r in spans} == {"gpu-node-7"}


def test_otlp_grpc_to_a_real_receiver():
    with otlp_grpc_receiver() as (endpoint, received):
        registry = CollectorRegistry()
        exporter = TraceExporter.from_env({"exporter": "otlp-grpc", "endpoint": endpoint}, registry=registry,
                                          offset=OFFSET)
        try:
            trace_id = exporter.export_timeline(preempted_timeline(), traceparent=TRACEPARENT)
            assert exporter.flush(10)
        finally:
            exporter.shutdown()
    check_received(otlp_spans(received), trace_id)
    assert exporter.stats()["exported"] == 9
    assert registry.get_sample_value("stagelens_trace_spans_exported_total", {"exporter": "otlp-grpc"}) == 9


def test_dead_endpoint_counts_failures_after_flush():
    registry = CollectorRegistry()
    exporter = TraceExporter.from_env({"exporter": "otlp-http", "endpoint": f"http://127.0.0.1:{closed_port()}",
                                       "export_timeout_s": 0.2}, registry=registry, offset=OFFSET)
    try:
        assert exporter.export_timeline(small_timeline("r1")) is not None   # returns with the endpoint down
        assert exporter.flush(5)
        stats = exporter.stats()
    finally:
        exporter.shutdown()
    assert stats["failed"] == 4 and stats["exported"] == 0 and stats["dropped"] == 0
    assert registry.get_sample_value("stagelens_trace_spans_failed_total", {"exporter": "otlp-http"}) == 4


def test_slow_collector_never_holds_the_caller():
    slow = OtlpHttpReceiver(hold=True)
    exporter = TraceExporter.from_env({"exporter": "otlp-http", "endpoint": slow.base_url, "export_timeout_s": 5,
                                       "schedule_delay_s": 10}, offset=OFFSET)
    try:
        exporter.export_timeline(small_timeline("r1"))
        exporter.flush(0)                          # wake the worker without waiting
        assert slow.got_request.wait(5)            # the worker is inside the POST, the collector holds it...
        exporter.export_timeline(small_timeline("r2", 20.0))   # ...and the caller still gets through at once
        assert exporter.stats()["in_flight"] == 4
        assert not exporter.flush(0.05)            # nothing answered yet
        slow.release.set()
        assert exporter.flush(5)
        stats = exporter.stats()
    finally:
        exporter.shutdown()
        slow.close()
    assert stats["exported"] == 8 and stats["failed"] == 0 and stats["submitted"] == 8


def test_slow_collector_past_the_timeout_counts_failures():
    slow = OtlpHttpReceiver(hold=True)
    exporter = TraceExporter.from_env({"exporter": "otlp-http", "endpoint": slow.base_url,
                                       "export_timeout_s": 0.2}, offset=OFFSET)
    try:
        exporter.export_timeline(small_timeline("r1"))
        assert exporter.flush(5)
        stats = exporter.stats()
    finally:
        exporter.shutdown()
        slow.close()
    assert stats["failed"] == 4 and stats["exported"] == 0
