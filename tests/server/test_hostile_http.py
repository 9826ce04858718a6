"""Issue 24 items 9 and 14 against the two small HTTP listeners beside the agent's main server: the vLLM
face's `/metrics` and the OTLP/HTTP receiver. Slow clients and clients that leave early, over real
sockets; both listeners keep serving normal requests after."""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from stagelens.engine_hooks.engine.vllm_face.server import MetricsServer
from stagelens.sources.otlp.receiver import OtlpReceiver
from tests.helpers.otlp_posts import one_request_body, post
from tests.helpers.polling import wait_for
from tests.helpers.second_host import SECOND_HOST, connect_from

DEADLINE_S = 5.0


class _Big:
    """A collector whose exposition (8 MiB) cannot sit in a socket's buffers: writing it needs a reader."""

    def collect(self):
        yield GaugeMetricFamily("vllm:big", "x" * (8 << 20), value=1.0)


def _face(**bounds) -> MetricsServer:
    registry = CollectorRegistry()
    registry.register(_Big())
    return MetricsServer(registry, **bounds).start()


def _otlp(**bounds) -> OtlpReceiver:
    return OtlpReceiver(**bounds).start()


def _port(listener) -> int:
    url = listener.url if isinstance(listener, MetricsServer) else listener.http_url
    return int(url.rsplit(":", 1)[1])


def _serves(listener) -> bool:
    if isinstance(listener, MetricsServer):
        with urllib.request.urlopen(listener.url + "/metrics", timeout=DEADLINE_S) as answer:
            return answer.status == 200
    return post(listener.http_url + "/v1/traces", one_request_body())[0] == 200


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the listener ended the connection (the client sends headers only: nothing else to read)."""
    if not select.select([sock], [], [], 0.05)[0]:
        return False
    with contextlib.suppress(OSError):
        sock.recv(4096)
    return True


@pytest.mark.parametrize("start", [_face, _otlp], ids=["vllm-face", "otlp-http"])
def test_hostile_9_dripped_headers_are_cut_at_the_request_deadline(start):
    listener = start(request_read_timeout_s=0.5)
    try:
        with socket.create_connection(("127.0.0.1", _port(listener)), timeout=DEADLINE_S) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            # a header byte every 50 ms: each read is quick, the whole never ends; 400 drips is 20 s
            cut = False
            for _ in range(400):
                with contextlib.suppress(OSError):
                    s.sendall(b"X")
                if _closed_by_peer(s):
                    cut = True
                    break
            assert cut, "a connection dripping its headers was held past the deadline"
        assert _serves(listener)
    finally:
        listener.stop()


@pytest.mark.parametrize("start", [_face, _otlp], ids=["vllm-face", "otlp-http"])
def test_hostile_9_connections_past_the_cap_are_a_503_without_a_thread(start):
    listener = start(max_connections=4)
    held: list[socket.socket] = []
    try:
        # one host may hold 3 of the 4 (its fair share): a second host holds the last
        for source in ("127.0.0.1",) * 3 + (SECOND_HOST,):
            held.append(connect_from(source, _port(listener), timeout=DEADLINE_S))
        server = listener._server if isinstance(listener, MetricsServer) else listener._http
        wait_for(lambda: server.open_connections == 4, what="four connections held")
        with connect_from(SECOND_HOST, _port(listener), timeout=DEADLINE_S) as extra:
            answer = b""                # answered at once, before any request, then closed
            while chunk := extra.recv(4096):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and b"\r\nRetry-After: 1" in head
        assert f"\r\nContent-Length: {len(body)}\r\n".encode() in head and body.endswith(b"\n")
        assert server.refused_busy == 1
    finally:
        for sock in held:
            sock.close()
    try:
        wait_for(lambda: server.open_connections == 0, what="the held connections released")
        assert _serves(listener)
    finally:
        listener.stop()


def test_hostile_14_scrapers_leaving_before_the_answer_are_counted_not_logged(capfd):
    face = _face()
    try:
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", face.port), timeout=DEADLINE_S) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))    # close = reset
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                s.recv(1)                       # the answer has begun: it is being written
        wait_for(lambda: face.clients_gone == 20, what="20 clients gone counted")
        assert _serves(face)
    finally:
        face.stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err
