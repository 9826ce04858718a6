"""Issue 24's fair intake: a hostile host holding its share of the OTLP byte budget, the gRPC call slots
or the HTTP connections does not starve a second host; the hostile host itself is refused with a status
its exporter retries; an IPv6 host is its /64; what was held is given back when a request ends, well or
not. The second host is 127.0.0.2 (tests/helpers/second_host.py)."""

from __future__ import annotations

import os
import socket
import threading

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from stagelens.engine_hooks.shared.fair_share import BUSY, BUSY_PEER, FairShare, grpc_peer_key, peer_key
from stagelens.sources.otlp.receiver import OtlpReceiver
from tests.helpers.otlp_posts import DEADLINE_S, one_request_body, post
from tests.helpers.polling import wait_for
from tests.helpers.second_host import SECOND_HOST, Relay, connect_from

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MIB = 1 << 20


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


def _port(r: OtlpReceiver) -> int:
    return int(r.http_url.rsplit(":", 1)[1])


def _post_head(sock: socket.socket, length: int) -> None:
    sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                 b"Content-Length: %d\r\n\r\n" % length)


def _answer(sock: socket.socket) -> bytes:
    answer = b""
    while b"\r\n\r\n" not in answer and (chunk := sock.recv(4096)):
        answer += chunk
    return answer


# -- the byte budget


def test_a_host_holding_its_share_of_the_bytes_does_not_starve_a_second_host():
    # 2 MiB in flight, 1.5 MiB for one host: the hostile host's second 1 MiB body is past its share
    with OtlpReceiver(max_body_bytes=MIB, max_inflight_bytes=2 * MIB, read_timeout_s=30) as r, \
            connect_from(SECOND_HOST, _port(r), DEADLINE_S) as stalled, \
            connect_from(SECOND_HOST, _port(r), DEADLINE_S) as second:
        _post_head(stalled, MIB)
        wait_for(lambda: r.bytes_in_flight == MIB, what="the hostile host's stalled body holds 1 MiB")
        _post_head(second, MIB)
        second.sendall(b"\0" * MIB)                      # read and dropped, then the answer
        head = _answer(second)
        assert head.startswith(b"HTTP/1.1 503") and b"\r\nRetry-After: 1\r\n" in head
        assert r.counts["busy_peer"] == 1 and r.counts["busy"] == 0
        # the quarter left serves this host at once
        assert post(r.http_url + "/v1/traces", one_request_body())[0] == 200
        assert len(r.recent_timelines()) == 1


def test_the_bytes_are_given_back_when_a_request_ends_well_or_not():
    with OtlpReceiver(read_timeout_s=0.5, grpc_port=0) as r:
        assert post(r.http_url + "/v1/traces", one_request_body())[0] == 200
        assert post(r.http_url + "/v1/traces", b"\xff not protobuf")[0] == 400
        with connect_from(SECOND_HOST, _port(r), DEADLINE_S) as cut:     # a body that never all comes: 408
            _post_head(cut, 1000)
            cut.sendall(b"x" * 10)
            assert _answer(cut).startswith(b"HTTP/1.1 408")
        with connect_from(SECOND_HOST, _port(r), DEADLINE_S) as gone:    # a sender that leaves mid-body
            _post_head(gone, 1000)
            gone.sendall(b"x" * 10)
        with grpc.insecure_channel(r.grpc_address) as channel:
            channel.unary_unary(EXPORT)(one_request_body(), timeout=DEADLINE_S)
            with pytest.raises(grpc.RpcError) as bad:
                channel.unary_unary(EXPORT)(b"\xff not protobuf", timeout=DEADLINE_S)
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        wait_for(lambda: r.bytes_in_flight == 0 and r._grpc.calls.held == 0, what="every byte and call slot given back")
        assert r.bodies.held_by("127.0.0.1") == r.bodies.held_by(SECOND_HOST) == 0


def test_the_bytes_are_given_back_before_the_answer_so_a_sender_s_next_body_is_taken():
    # one host may hold 1.5 MiB: a 1 MiB body's bytes still held once it is answered would refuse the next
    with OtlpReceiver(max_body_bytes=MIB, max_inflight_bytes=2 * MIB) as r:
        big = b"\xff" * MIB                               # refused as malformed once read whole
        for _ in range(20):
            assert post(r.http_url + "/v1/traces", big)[0] == 400
        assert r.counts["busy_peer"] == r.counts["busy"] == 0


# -- the gRPC call slots


def _stalled_calls(channel, n: int, release: threading.Event) -> list:
    def never_ending():
        yield one_request_body()
        release.wait(DEADLINE_S * 4)       # the call stays open: no end of stream

    export = channel.stream_unary(EXPORT)
    return [export.future(never_ending()) for _ in range(n)]


def test_a_host_holding_its_share_of_the_grpc_calls_is_refused_to_retry_and_a_second_host_is_served():
    release = threading.Event()
    with OtlpReceiver(http_port=None, grpc_port=0, read_timeout_s=DEADLINE_S * 2) as r, \
            grpc.insecure_channel(r.grpc_address) as channel, Relay(r._grpc.port) as second_host, \
            grpc.insecure_channel(second_host.address) as hostile:
        stalled = _stalled_calls(hostile, 4, release)                    # 4 of the 6 slots: its share
        try:
            wait_for(lambda: r._grpc.calls.held == 4, what="the hostile host holds its share of the calls")
            with pytest.raises(grpc.RpcError) as refused:
                hostile.unary_unary(EXPORT)(one_request_body(), timeout=DEADLINE_S)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE     # OTel's exporters retry it
            trailers = dict(refused.value.trailing_metadata())
            retry = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
            status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
            assert retry.retry_delay.seconds >= 1 and status.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)
            assert r.counts["busy_peer"] == 1
            channel.unary_unary(EXPORT)(one_request_body(), timeout=DEADLINE_S)   # this host: served at once
            assert len(r.recent_timelines()) == 1
        finally:
            release.set()
        assert all(call.exception(DEADLINE_S) is None for call in stalled)
        wait_for(lambda: r._grpc.calls.held == 0, what="the call slots given back")


# -- the HTTP connections


def test_a_host_holding_its_share_of_the_connections_does_not_starve_a_second_host():
    with OtlpReceiver(max_connections=4) as r:
        held = [connect_from(SECOND_HOST, _port(r), DEADLINE_S) for _ in range(3)]    # 3 of 4: its share
        try:
            wait_for(lambda: r._http.open_connections == 3, what="the hostile host holds its share of the connections")
            with connect_from(SECOND_HOST, _port(r), DEADLINE_S) as extra:
                head = _answer(extra)
            assert head.startswith(b"HTTP/1.1 503") and b"\r\nRetry-After: 1\r\n" in head
            assert r.counts["busy_peer"] == 1
            assert post(r.http_url + "/v1/traces", one_request_body())[0] == 200
        finally:
            for sock in held:
                sock.close()
        wait_for(lambda: r._http.open_connections == 0, what="the connections given back")
        assert r._http._connections.held == 0


# -- who is one host


@pytest.mark.parametrize(("address", "host"), [
    ("10.1.2.3", "10.1.2.3"),
    ("2001:db8:0:7::1", "2001:db8:0:7::/64"),
    ("2001:db8:0:7:ffff:ffff:ffff:ffff", "2001:db8:0:7::/64"),
    ("2001:db8:0:8::1", "2001:db8:0:8::/64"),
    ("::ffff:10.1.2.3", "10.1.2.3"),                   # an IPv4 client of a dual-stack listener
    ("fe80::1%eth0", "fe80::/64"),
])
def test_a_host_is_its_ipv4_address_or_its_ipv6_slash_64(address, host):
    assert peer_key(address) == host


@pytest.mark.parametrize(("peer", "host"), [
    ("ipv4:10.1.2.3:50051", "10.1.2.3"),
    ("ipv6:[2001:db8:0:7::1]:50051", "2001:db8:0:7::/64"),
    ("ipv6:%5B2001:db8:0:7::2%5D:50051", "2001:db8:0:7::/64"),
])
def test_grpc_peers_are_grouped_by_host(peer, host):
    assert grpc_peer_key(peer) == host


def test_addresses_of_one_ipv6_slash_64_share_one_share():
    share = FairShare(8)                                 # 6 for one host
    for i in range(6):
        assert share.take(peer_key(f"2001:db8:0:7::{i + 1:x}")) is None
    assert share.take(peer_key("2001:db8:0:7::99")) == BUSY_PEER
    assert share.take(peer_key("2001:db8:0:8::1"), 2) is None     # another /64
    assert share.take(peer_key("2001:db8:0:9::1")) == BUSY
    share.give(peer_key("2001:db8:0:7::1"), 6)
    assert share.held == 2 and share.held_by("2001:db8:0:7::/64") == 0
