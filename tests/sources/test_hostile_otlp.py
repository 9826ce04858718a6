"""The hostile sweep of issue 24 against the OTLP receiver: each defect reproduced with its input over real
sockets, by the real exporters where they can send it, and the receiver still taking normal spans after."""

from __future__ import annotations

import os
import socket
import threading
import urllib.error
import urllib.request

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.common.v1 import common_pb2

from stagelens.sources.otlp.receiver import OtlpReceiver
from tests.helpers.otlp_posts import DEADLINE_S, closed_port, one_request_body, post, vllm_spans, wait_for
from tests.helpers.second_host import SECOND_HOST, Relay, connect_from

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture
def receiver():
    r = OtlpReceiver(read_timeout_s=1.0).start()
    yield r
    r.stop()


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
        with grpc.insecure_channel(r.grpc_address) as channel:
            channel.unary_unary(EXPORT)(body, timeout=DEADLINE_S)
        assert len(r.recent_timelines()) == 100
        assert r.counts["malformed_spans"] == 2 and r.counts["malformed"] == 0
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text


# -- 1: one message must not take the agent past its memory limit


def _wire(field: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    from google.protobuf.internal.encoder import _VarintBytes

    return _VarintBytes(field << 3 | 2) + _VarintBytes(len(payload)) + payload


def empty_spans_body(n: int) -> bytes:
    """An ExportTraceServiceRequest of `n` empty spans in one scope: 2 bytes each on the wire."""
    return _wire(1, _wire(2, _wire(2, b"") * n))     # resource_spans { scope_spans { spans {} x n } }


def empty_spans_json(n: int) -> bytes:
    return b'{"resourceSpans": [{"scopeSpans": [{"spans": [' + b",".join([b"{}"] * n) + b"]}]}]}"


def test_hostile_1_a_grpc_export_of_2m_empty_spans_is_refused_before_it_is_parsed():
    body = empty_spans_body(2_000_000)
    assert len(body) <= 4 * 1024 * 1024
    with OtlpReceiver(http_port=None, grpc_port=0) as r, grpc.insecure_channel(r.grpc_address) as channel:
        export = channel.unary_unary(EXPORT)
        with pytest.raises(grpc.RpcError) as refused:
            export(body, timeout=DEADLINE_S)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "spans in one request" in refused.value.details()
        assert (r.counts["rejected"], r.counts["spans"]) == (1, 0)
        export(one_request_body(), timeout=DEADLINE_S)
        assert len(r.recent_timelines()) == 1


@pytest.mark.parametrize("content_type, body, reason", [
    ("application/x-protobuf", empty_spans_body(2_000_000), b"spans in one request"),
    ("application/json", empty_spans_json(1_000_000), b"send smaller batches"),
], ids=["protobuf", "json"])
def test_hostile_1_an_http_body_of_millions_of_empty_spans_is_a_413(receiver, content_type, body, reason):
    status, _, answer = post(receiver.http_url + "/v1/traces", body, content_type)
    assert status == 413 and reason in answer
    assert (receiver.counts["rejected"], receiver.counts["spans"]) == (1, 0)
    assert post(receiver.http_url + "/v1/traces", one_request_body())[0] == 200


def test_hostile_1_a_batch_just_inside_the_bounds_is_taken_whole(receiver):
    from stagelens.sources.otlp.decode import MAX_SPANS

    assert post(receiver.http_url + "/v1/traces", empty_spans_body(MAX_SPANS))[0] == 200
    assert receiver.counts["spans"] == MAX_SPANS and receiver.counts["rejected"] == 0


def test_hostile_1_bodies_in_flight_past_the_byte_budget_are_a_503_to_retry():
    with OtlpReceiver(max_body_bytes=1 << 20, max_inflight_bytes=2 << 20, read_timeout_s=30) as r:
        port = int(r.http_url.rsplit(":", 1)[1])
        with connect_from(SECOND_HOST, port, DEADLINE_S) as stalled, \
                connect_from("127.0.0.1", port, DEADLINE_S) as mine:
            # two hosts' senders holding the whole budget between them (neither past its share), bodies still coming
            for sender in (stalled, mine):
                sender.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                               b"Content-Length: %d\r\n\r\nxx" % (1 << 20))
            wait_for(lambda: r.bytes_in_flight == 2 << 20, "the stalled requests hold the budget")
            req = urllib.request.Request(r.http_url + "/v1/traces", data=one_request_body(),
                                         headers={"Content-Type": "application/x-protobuf"})
            with pytest.raises(urllib.error.HTTPError) as busy:
                urllib.request.urlopen(req, timeout=DEADLINE_S)
            assert busy.value.code == 503 and busy.value.headers["Retry-After"] == "1"
            assert (r.counts["busy"], r.counts["busy_peer"]) == (1, 0)
        # the stalled senders gone, its bytes are given back
        wait_for(lambda: r.bytes_in_flight == 0, "the budget given back")
        wait_for(lambda: post(r.http_url + "/v1/traces", one_request_body())[0] == 200, "accepted again")


# -- 3: stalled calls must not take every gRPC worker


def test_hostile_3_stalled_grpc_exports_do_not_block_a_normal_one():
    release = threading.Event()

    def never_ending():
        yield one_request_body()
        release.wait(DEADLINE_S * 4)       # the call stays open: no end of stream

    with OtlpReceiver(http_port=None, grpc_port=0, read_timeout_s=DEADLINE_S * 2) as r, \
            grpc.insecure_channel(r.grpc_address) as channel, Relay(r._grpc.port) as second_host, \
            grpc.insecure_channel(second_host.address) as hostile:
        stalled_export = hostile.stream_unary(EXPORT)
        # the old pool had 4 workers; 4 is also one host's share of the 6 call slots
        stalled = [stalled_export.future(never_ending()) for _ in range(4)]
        wait_for(lambda: r._grpc.calls.held == 4, "the stalled calls hold their slots")
        try:
            channel.unary_unary(EXPORT)(one_request_body(), timeout=DEADLINE_S)
            assert len(r.recent_timelines()) == 1
            assert not any(call.done() for call in stalled)
        finally:
            release.set()
        assert all(call.exception(DEADLINE_S) is None for call in stalled)      # released: taken
        assert len(r.recent_timelines()) == 5


def test_hostile_3_a_grpc_export_whose_message_never_comes_is_cut_at_the_read_deadline():
    release = threading.Event()

    def nothing():
        release.wait(DEADLINE_S * 4)
        yield from ()

    with OtlpReceiver(http_port=None, grpc_port=0, read_timeout_s=0.3) as r, \
            grpc.insecure_channel(r.grpc_address) as channel:
        call = channel.stream_unary(EXPORT).future(nothing())
        try:
            assert call.exception(DEADLINE_S).code() == grpc.StatusCode.DEADLINE_EXCEEDED
        finally:
            release.set()
        assert r.counts["rejected"] == 1


# -- 6: a second agent on the same gRPC port


def test_hostile_6_a_second_receiver_on_a_taken_grpc_port_fails_to_start(capsys):
    from stagelens.cli import main
    from stagelens.commands.flags import OutsideFlags, open_engine_source
    from stagelens.errors import UserError
    from tests.helpers.engine_stub import DGX

    with OtlpReceiver(http_port=None, grpc_port=0) as first:
        port = int(first.grpc_address.rsplit(":", 1)[1])
        with pytest.raises(OSError, match="cannot listen for OTLP/gRPC"):
            OtlpReceiver(http_port=None, grpc_port=port).start()
        source = open_engine_source("vllm", OutsideFlags(f"http://127.0.0.1:{closed_port()}",
                                                         otlp_receiver_grpc=f"127.0.0.1:{port}"))
        with pytest.raises(UserError, match="cannot listen for the engine's traces"):
            source.start()
        with pytest.raises(SystemExit) as exit_:      # the command: a one-line usage error, exit 3
            main(["--nvml-snapshot", DGX, "diagnose", "--engine", "vllm", "--engine-url",
                  f"http://127.0.0.1:{closed_port()}", "--otlp-receiver-grpc", f"127.0.0.1:{port}"])
        err = capsys.readouterr().err
        assert exit_.value.code == 3 and "cannot listen for OTLP/gRPC" in err and "Traceback" not in err
        with grpc.insecure_channel(first.grpc_address) as channel:
            channel.unary_unary(EXPORT)(one_request_body(), timeout=DEADLINE_S)
        assert len(first.recent_timelines()) == 1


# -- 7: a hung upstream must not make the forwarder hold every body


def test_hostile_7_a_hung_upstream_holds_at_most_the_forward_bytes_bound():
    from stagelens.sources.otlp.forward import MAX_QUEUED_BYTES

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)              # connections are accepted by the kernel, never answered
    r = OtlpReceiver(forward_to=f"http://127.0.0.1:{hung.getsockname()[1]}/v1/traces", forward_timeout_s=30).start()
    try:
        body = one_request_body(**{"gen_ai.request.model": "m" * (3 * 1024 * 1024)})
        for _ in range(10):
            assert post(r.http_url + "/v1/traces", body)[0] == 200
        assert 0 < r.forward_queued_bytes <= MAX_QUEUED_BYTES
        assert r.counts["forward_dropped"] >= 10 - 1 - MAX_QUEUED_BYTES // len(body)
        assert len(r.recent_timelines()) == 10
    finally:
        hung.close()
        r.stop()
