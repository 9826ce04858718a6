"""The hostile sweep of issue 24 against the OTLP receiver: each defect reproduced with its input over real
sockets, by the real exporters where they can send it, and the receiver still taking normal spans after."""

from __future__ import annotations

import os

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.common.v1 import common_pb2
from test_otlp_receiver import post, vllm_spans

from agent.sources.otlp_receiver import OtlpReceiver


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


def _batch(good: int, *bad_attrs: dict):
    """An ExportTraceServiceRequest of `good` vLLM spans, then one more per dict in `bad_attrs` with those
    attributes set on top."""
    request = encode_spans(vllm_spans(*({"gen_ai.request.id": f"ok{i}"} for i in range(good + len(bad_attrs)))))
    spans = request.resource_spans[0].scope_spans[0].spans
    for span, attrs in zip(spans[good:], bad_attrs, strict=True):
        for key, value in attrs.items():
            span.attributes.add(key=key, value=common_pb2.AnyValue(string_value=value))
    return request


def test_hostile_8_a_span_whose_finish_reasons_nest_too_deep_is_dropped_alone(caplog):
    body = _batch(50, {"gen_ai.response.finish_reasons": "[" * 100_000}).SerializeToString()
    with OtlpReceiver(grpc_port=0) as r:
        status, _, _ = post(r.http_url + "/v1/traces", body)
        assert status == 200
        import grpc

        with grpc.insecure_channel(r.grpc_address) as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            export(body, timeout=10)
        assert len(r.recent_timelines()) == 100
        assert r.counts["malformed_spans"] == 2 and r.counts["malformed"] == 0
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text
