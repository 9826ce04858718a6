"""The agent as vLLM's OTLP traces endpoint: real sockets, the real OpenTelemetry SDK and exporters.

Spans are built the way vLLM builds them (an SDK TracerProvider, one `llm_request` SERVER span per
request, started at the arrival with explicit times, parented to the client's traceparent, with vLLM's
`gen_ai.*` attributes) and sent by the real OTLP/HTTP and OTLP/gRPC exporters.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import Status, StatusCode

from stagelens.engine_hooks.records.timeline import PrefillChunk, Wait
from stagelens.sources.otlp.llm_request_spans import QUEUED, timeline_from_span
from stagelens.sources.otlp.receiver import OtlpReceiver
from tests.helpers.otlp_posts import DEADLINE_S, closed_port, one_request_body, post, vllm_spans, wait_for


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


@pytest.fixture
def receiver():
    r = OtlpReceiver(read_timeout_s=1.0).start()
    yield r
    r.stop()


# -- helpers


def export_http(receiver: OtlpReceiver, spans, compression=Compression.NoCompression) -> SpanExportResult:
    exporter = HttpSpanExporter(endpoint=receiver.http_url + "/v1/traces", timeout=DEADLINE_S,
                                compression=compression)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


class Recorder:
    """An OTLP/HTTP upstream that keeps what it is sent, raw."""

    def __init__(self) -> None:
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.headers.get("Content-Type"), self.headers.get("Content-Encoding"), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def check_vllm_timeline(tl, offset: float, start_ns: int) -> None:
    arrival = start_ns / 1e9 + offset
    assert tl.request_id == "cmpl-1"
    assert tl.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert (tl.prompt_tokens, tl.output_tokens) == (512, 64)
    assert tl.arrival == pytest.approx(arrival, abs=1e-6)
    assert tl.finished - tl.arrival == pytest.approx(1.5, abs=1e-6)
    assert tl.first_token - tl.arrival == pytest.approx(0.4, abs=1e-6)
    assert tl.waits == [Wait(start=tl.arrival, end=pytest.approx(tl.arrival + 0.25, abs=1e-6), reason=QUEUED)]
    assert tl.chunks == [PrefillChunk(start=pytest.approx(tl.arrival + 0.25, abs=1e-6),
                                      end=pytest.approx(tl.arrival + 0.37, abs=1e-6), tokens=512, step=0)]
    assert [e for _, e in tl.events] == ["arrival", "scheduled", "first_token", "finished"]
    assert tl.finish_reason is None                     # vLLM sets no status and no finish reason
    assert tl.latency_components == pytest.approx({QUEUED: 0.25, "compute": 1.25}, abs=1e-6)
    assert sum(tl.latency_components.values()) == pytest.approx(1.5, abs=1e-6)     # = gen_ai.latency.e2e
    assert tl.ttft_components == pytest.approx({QUEUED: 0.25, "compute": 0.15}, abs=1e-6)
    assert tl.scheduler_wait_s == pytest.approx(0.25, abs=1e-6)


# -- the exporters vLLM uses, against the receiver


def test_http_protobuf_llm_request_span_becomes_a_timeline(receiver):
    spans = vllm_spans({}, other=2)
    assert export_http(receiver, spans) == SpanExportResult.SUCCESS
    [tl] = receiver.recent_timelines()
    root = next(s for s in spans if s.name == "llm_request")
    assert root.parent.span_id == int("b7ad6b7169203331", 16)          # parented to the client's traceparent
    check_vllm_timeline(tl, receiver.clock_offset, root.start_time)
    counts = receiver.counts
    assert (counts["received_requests"], counts["spans"], counts["llm_request_spans"], counts["ignored_spans"]) \
        == (1, 3, 1, 2)
    assert counts["malformed"] == counts["malformed_spans"] == counts["invalid_attributes"] == 0


def test_grpc_exporter():
    with OtlpReceiver(http_port=None, grpc_port=0) as r:
        assert r.http_url is None and r.grpc_address.startswith("127.0.0.1:")
        spans = vllm_spans({}, other=1)
        exporter = GrpcSpanExporter(endpoint=r.grpc_address, insecure=True, timeout=DEADLINE_S)
        try:
            assert exporter.export(spans) == SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()
        [tl] = r.recent_timelines()
        check_vllm_timeline(tl, r.clock_offset, spans[0].start_time)
        assert r.counts["ignored_spans"] == 1


def test_gzip(receiver):
    spans = vllm_spans({})
    assert export_http(receiver, spans, Compression.Gzip) == SpanExportResult.SUCCESS
    [tl] = receiver.recent_timelines()
    check_vllm_timeline(tl, receiver.clock_offset, spans[0].start_time)


def test_recent_timelines_since_and_the_ring():
    with OtlpReceiver(capacity=2) as r:
        t0 = time.time_ns() - 5_000_000_000
        spans = vllm_spans(*({"gen_ai.request.id": f"r{i}", "start_ns": t0 + i * 1_000_000_000} for i in range(3)))
        assert export_http(r, spans) == SpanExportResult.SUCCESS
        kept = r.recent_timelines()
        assert [t.request_id for t in kept] == ["r1", "r2"]         # the oldest dropped
        assert r.counts["timelines_dropped"] == 1
        assert [t.request_id for t in r.recent_timelines(since=kept[0].finished)] == ["r2"]
        assert r.recent_timelines(since=kept[1].finished) == []
        assert kept[1].finished < time.monotonic()                  # this process's monotonic clock


# -- bodies the exporters do not send


def test_json_body(receiver):
    start = time.time_ns() - 3_000_000_000
    doc = {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]},
        "scopeSpans": [{"scope": {"name": "vllm"}, "spans": [
            {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "00f067aa0ba902b7",
             "parentSpanId": "b7ad6b7169203331", "name": "llm_request", "kind": 2,
             "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 2_000_000_000),
             "attributes": [
                 {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "100"}},
                 {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": 20}},
                 {"key": "gen_ai.latency.time_in_queue", "value": {"doubleValue": 0.5}},
                 {"key": "gen_ai.latency.time_to_first_token", "value": {"doubleValue": 0.75}},
                 {"key": "gen_ai.latency.time_in_model_prefill", "value": {"doubleValue": 0.2}},
                 {"key": "gen_ai.response.finish_reasons",
                  "value": {"arrayValue": {"values": [{"stringValue": "length"}]}}}],
             "status": {"code": 2}, "someFutureField": 1},
            {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "1111111111111111", "name": "other",
             "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 1)}]}]}]}
    status, content_type, body = post(receiver.http_url + "/v1/traces", json.dumps(doc).encode(), "application/json")
    assert (status, content_type, json.loads(body)) == (200, "application/json", {})
    [tl] = receiver.recent_timelines()
    assert tl.request_id == "00f067aa0ba902b7"             # no gen_ai.request.id: the span id, read as hex
    assert tl.model == "unknown"
    assert (tl.prompt_tokens, tl.output_tokens) == (100, 20)
    assert tl.finish_reason == "error"                     # an ERROR status wins over the finish reasons
    assert tl.latency_components == pytest.approx({QUEUED: 0.5, "compute": 1.5}, abs=1e-6)
    assert receiver.counts["ignored_spans"] == 1


def test_malformed_bodies_answer_400_and_the_receiver_keeps_serving(receiver):
    url = receiver.http_url + "/v1/traces"
    status, content_type, body = post(url, b"\xff\xff\xff\xff not protobuf")
    assert (status, content_type) == (400, "application/x-protobuf")
    reason = status_pb2.Status.FromString(body).message
    assert "ExportTraceServiceRequest" in reason and "\n" not in reason
    status, _, body = post(url, b'{"resourceSpans": [{"scopeSpans": 7}]}', "application/json")
    assert status == 400 and "\n" not in json.loads(body)["message"]
    assert post(url, b"not gzip", encoding="gzip")[0] == 400
    assert post(url, b"[", "application/json")[0] == 400
    assert receiver.counts["malformed"] == 4
    assert export_http(receiver, vllm_spans({})) == SpanExportResult.SUCCESS
    assert len(receiver.recent_timelines()) == 1


def test_too_large_other_types_paths_and_methods():
    with OtlpReceiver(max_body_bytes=4096) as r:
        url = r.http_url + "/v1/traces"
        status, _, body = post(url, b"\0" * 8192)
        assert status == 413 and b"exceeds 4096" in body
        assert post(url, gzip.compress(b"\0" * 8192), encoding="gzip")[0] == 413      # inflated past the limit
        assert post(url, b"x", "text/plain")[0] == 415
        assert post(url, b"x", encoding="br")[0] == 415
        assert post(r.http_url + "/v1/metrics", b"x")[0] == 404
        assert post(url, b"", method="PUT")[0] == 405
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url, timeout=DEADLINE_S)
        assert e.value.code == 405
        assert r.counts["rejected"] == 4 and r.counts["malformed"] == 0
        assert export_http(r, vllm_spans({})) == SpanExportResult.SUCCESS


def test_a_body_that_never_comes_is_cut_off(receiver):
    port = int(receiver.http_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as s:
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                  b"Content-Length: 100\r\n\r\n0123456789")
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408")
    assert b"Connection: close" in answer


def test_stop_ends_kept_alive_connections():
    r = OtlpReceiver().start()
    port = int(r.http_url.rsplit(":", 1)[1])
    body = one_request_body()
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as s:
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        r.stop()
        assert s.recv(4096) == b""             # closed by the receiver, not left to its idle timeout


# -- forwarding


def test_forwarding_sends_the_identical_bytes():
    upstream = Recorder()
    try:
        with OtlpReceiver(forward_to=upstream.url) as r, OtlpReceiver() as second:
            body = gzip.compress(one_request_body())
            assert post(r.http_url + "/v1/traces", body, encoding="gzip")[0] == 200
            wait_for(lambda: r.counts["forwarded"] == 1, "forwarded")
            assert upstream.received == [("application/x-protobuf", "gzip", body)]
            # and the next receiver in a chain reads them as the first did
            chained = OtlpReceiver(forward_to=second.http_url + "/v1/traces").start()
            try:
                assert export_http(chained, vllm_spans({})) == SpanExportResult.SUCCESS
                wait_for(lambda: len(second.recent_timelines()) == 1, "the chained receiver has the timeline")
            finally:
                chained.stop()
            assert second.recent_timelines()[0].request_id == chained.recent_timelines()[0].request_id
    finally:
        upstream.close()


def test_a_dead_upstream_does_not_delay_the_answers():
    with OtlpReceiver(forward_to=f"http://127.0.0.1:{closed_port()}/v1/traces") as r:
        exporter = HttpSpanExporter(endpoint=r.http_url + "/v1/traces", timeout=DEADLINE_S)
        try:
            for _ in range(3):      # one exporter: its kept-alive connection is reused
                assert exporter.export(vllm_spans({})) == SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()
        assert len(r.recent_timelines()) == 3
        wait_for(lambda: r.counts["forward_failed"] == 3, "three failed forwards")
        assert r.counts["forwarded"] == 0


def test_a_hung_upstream_fills_the_queue_and_drops():
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)              # connections are accepted by the kernel, never answered
    r = OtlpReceiver(forward_to=f"http://127.0.0.1:{hung.getsockname()[1]}/v1/traces", forward_queue=1,
                     forward_timeout_s=30).start()
    try:
        body = one_request_body()
        for _ in range(5):
            assert post(r.http_url + "/v1/traces", body)[0] == 200
        assert r.counts["forward_dropped"] >= 3            # one in flight, one queued at most
        assert len(r.recent_timelines()) == 5
    finally:
        hung.close()            # resets the connection the forwarder waits on, so stop() need not wait
        r.stop()
    assert r.counts["forward_failed"] >= 1


# -- the span → timeline mapping alone


def _span(**attrs) -> trace_pb2.Span:
    span = trace_pb2.Span(name="llm_request", span_id=bytes.fromhex("00f067aa0ba902b7"),
                          start_time_unix_nano=1_700_000_000_000_000_000,
                          end_time_unix_nano=1_700_000_002_000_000_000)
    for key, value in attrs.items():
        if isinstance(value, common_pb2.AnyValue):
            any_value = value
        elif isinstance(value, bool):
            any_value = common_pb2.AnyValue(bool_value=value)
        elif isinstance(value, int):
            any_value = common_pb2.AnyValue(int_value=value)
        elif isinstance(value, float):
            any_value = common_pb2.AnyValue(double_value=value)
        else:
            any_value = common_pb2.AnyValue(string_value=value)
        span.attributes.add(key=key, value=any_value)
    return span


def test_bad_attributes_leave_figures_unknown_and_are_named():
    problems: list[str] = []
    tl = timeline_from_span(_span(**{"gen_ai.latency.time_in_queue": -0.1,
                                     "gen_ai.latency.time_to_first_token": "0.4",
                                     "gen_ai.latency.time_in_model_prefill": math.nan,
                                     "gen_ai.usage.prompt_tokens": 12.0,
                                     "gen_ai.usage.completion_tokens": True,
                                     "gen_ai.request.id": 7}), -1_699_000_000.0, problems)
    assert tl is not None and tl.request_id == "00f067aa0ba902b7"
    assert tl.arrival == pytest.approx(1_000_000.0) and tl.finished == pytest.approx(1_000_002.0)
    assert tl.first_token is None and tl.waits == [] and tl.chunks == [] and tl.ttft_components is None
    assert (tl.prompt_tokens, tl.output_tokens) == (0, 0)
    assert tl.latency_components == pytest.approx({"compute": 2.0})
    assert sorted(problems) == sorted(["gen_ai.latency.time_in_queue", "gen_ai.latency.time_to_first_token",
                                       "gen_ai.latency.time_in_model_prefill", "gen_ai.usage.prompt_tokens",
                                       "gen_ai.usage.completion_tokens", "gen_ai.request.id"])


def test_figures_past_the_span_and_unusable_spans():
    problems: list[str] = []
    tl = timeline_from_span(_span(**{"gen_ai.latency.time_to_first_token": 3.0, "gen_ai.latency.time_in_queue": 0}),
                            0.0, problems)
    assert tl.first_token is None and problems == ["gen_ai.latency.time_to_first_token"]
    assert tl.waits == [] and [e for _, e in tl.events] == ["arrival", "scheduled", "finished"]
    assert timeline_from_span(trace_pb2.Span(name="llm_request"), 0.0) is None               # no times
    backwards = _span()
    backwards.end_time_unix_nano = backwards.start_time_unix_nano - 1
    assert timeline_from_span(backwards, 0.0) is None
    assert timeline_from_span(trace_pb2.Span(name="other", start_time_unix_nano=1, end_time_unix_nano=2), 0.0) is None


def test_finish_reason_and_model_fallbacks():
    reasons = common_pb2.AnyValue(array_value=common_pb2.ArrayValue(values=[common_pb2.AnyValue(string_value="stop")]))
    tl = timeline_from_span(_span(**{"gen_ai.response.finish_reasons": reasons, "gen_ai.request.model": "m"}), 0.0)
    assert (tl.finish_reason, tl.model) == ("stop", "m")
    span = _span()
    span.status.code = trace_pb2.Status.STATUS_CODE_OK
    assert timeline_from_span(span, 0.0).finish_reason is None
    span.status.code = trace_pb2.Status.STATUS_CODE_ERROR
    assert timeline_from_span(span, 0.0).finish_reason == "error"


def test_an_export_request_round_trips_through_the_encoder():
    spans = vllm_spans({"status": Status(StatusCode.ERROR, "boom")})
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(one_request_body())
    assert request.resource_spans[0].scope_spans[0].spans[0].name == "llm_request"
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    [span] = encode_spans(spans).resource_spans[0].scope_spans[0].spans
    assert timeline_from_span(span, 0.0).finish_reason == "error"
