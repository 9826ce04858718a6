"""`diagnose --connect` and `tui --connect` against servers that misbehave: tiny real servers on
127.0.0.1 answering garbage, the wrong JSON, too much, or one byte every few seconds."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import pytest

from stagelens.diagnosis import diagnose
from stagelens.diagnosis.model import Diagnosis
from stagelens.diagnosis_text import render_diagnosis
from stagelens.errors import EXIT_CRITICAL, CollectError
from stagelens.http_client import MAX_ANSWER_BYTES, get_json
from stagelens.tui.remote_feed import RemoteFeed
from tests.helpers.cli_run import assert_one_line_error, stagelens
from tests.helpers.frame_builders import engine_snapshot, frame


@contextlib.contextmanager
def tcp_server(answer):
    """A server on 127.0.0.1 that reads each request's head, then calls `answer(conn, stop)`."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            with contextlib.suppress(OSError):   # the client gave up: what these servers are for
                answer(conn, stop)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


def http_answer(body: bytes, status: str = "200 OK"):
    def answer(conn, _stop):
        conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     f"Connection: close\r\n\r\n".encode() + body)
    return answer


def dribble(conn, stop):
    """One byte every 3 s for up to a minute: no single read ever times out."""
    for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" * 4:
        if stop.wait(3):
            return
        conn.sendall(bytes([byte]))


def flood(conn, stop):
    """A body that never ends."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[")
    block = b"1," * 32768
    while not stop.is_set():
        conn.sendall(block)


def _diagnosis(verdict: str = "firing") -> dict:
    d = diagnose([frame(i, engine_snapshot(kv={"fragmentation_ratio": 0.6})) for i in range(4)]).to_dict()
    return {**d, "verdict": verdict}


def test_a_real_diagnosis_still_gives_its_verdict():
    with tcp_server(http_answer(json.dumps(_diagnosis()).encode())) as url:
        proc = stagelens("diagnose", "--connect", url)
    assert proc.returncode == EXIT_CRITICAL, proc.stderr
    assert "verdict: FIRING" in proc.stdout and "kv_cache" in proc.stdout


def test_a_fetched_diagnosis_prints_as_a_local_one():
    document = _diagnosis()
    with tcp_server(http_answer(json.dumps(document).encode())) as url:
        text = stagelens("diagnose", "--connect", url)
        as_json = stagelens("diagnose", "--json", "--connect", url)
    assert text.stdout == render_diagnosis(Diagnosis.from_dict(document)) + "\n"
    assert "runbook: runbooks/KVCacheStageFiring.md" in text.stdout
    assert json.loads(as_json.stdout) == document and as_json.returncode == EXIT_CRITICAL


@pytest.mark.parametrize("body, words", [
    (b"{not json", ["the answer is not JSON"]),
    (b"\xff\xfe\x00garbage", ["the answer is not JSON"]),
    (b"[" * 100000, ["the answer is not JSON"]),
    (b"[1, 2, 3]", ["not a stagelens diagnosis"]),
    (b'{"verdict": "ok", "stages": [{}]}', ["not a stagelens diagnosis"]),
    (b'{"verdict": "great", "stages": []}', ["not a stagelens diagnosis"]),
    (b'{"stages": []}', ["not a stagelens diagnosis"]),
    (json.dumps({**_diagnosis(), "stages": [{**_diagnosis()["stages"][0], "evidence": [{"value": "x"}]}]}).encode(),
     ["not a stagelens diagnosis", "stages[0].evidence[0].signal: missing"]),
    (json.dumps({**_diagnosis(), "stages": [{**_diagnosis()["stages"][0], "since": "soon"}]}).encode(),
     ["not a stagelens diagnosis", "stages[0].since"]),
], ids=["malformed", "binary", "nested", "list", "bare-stage", "bad-verdict", "no-verdict", "bad-evidence",
        "bad-since"])
def test_an_answer_that_is_not_a_diagnosis_is_one_line(body, words):
    with tcp_server(http_answer(body)) as url:
        assert_one_line_error(stagelens("diagnose", "--connect", url), url, *words)


def test_a_server_with_nothing_to_diagnose_is_unknown():
    with tcp_server(http_answer(json.dumps(_diagnosis("unknown")).encode())) as url:
        assert_one_line_error(stagelens("diagnose", "--connect", url), "nothing to diagnose", "unknown")


def test_an_http_error_is_one_line():
    with tcp_server(http_answer(b'{"detail": "no"}', "503 Service Unavailable")) as url:
        assert_one_line_error(stagelens("diagnose", "--connect", url), "HTTP 503")


def test_garbage_instead_of_http_is_one_line():
    with tcp_server(lambda conn, _stop: conn.sendall(b"\x00\x01 not http at all\r\n\r\n")) as url:
        assert_one_line_error(stagelens("diagnose", "--connect", url), url, "could not collect")


@pytest.mark.parametrize("command", ["diagnose", "tui"])
@pytest.mark.parametrize("url, words", [
    ("http://[::1", ["not a valid URL"]),
    ("http://127.0.0.1:99999", ["not a valid URL"]),
    ("ftp://127.0.0.1/", ["http:// or https://"]),
    ("127.0.0.1:9481", ["http:// or https://"]),
])
def test_a_url_that_cannot_be_asked_is_one_line(command, url, words):
    assert_one_line_error(stagelens(command, "--connect", url), *words)


def test_a_dribbling_server_costs_the_deadline_not_minutes():
    with tcp_server(dribble) as url:
        started = time.monotonic()
        proc = stagelens("diagnose", "--connect", url, timeout=60)
        took = time.monotonic() - started
    assert_one_line_error(proc, url, "no complete answer within 5 s")
    assert took < 20          # the server would have dribbled for a minute


def test_an_endless_answer_stops_at_the_cap():
    with tcp_server(flood) as url:
        proc = stagelens("diagnose", "--connect", url, timeout=60)
    assert_one_line_error(proc, url, f"larger than {MAX_ANSWER_BYTES} bytes")


def test_the_tui_remote_source_gives_up_on_a_dribbling_server_in_time():
    with tcp_server(dribble) as url:
        started = time.monotonic()
        poll = RemoteFeed(url, timeout=2.0).poll()
        took = time.monotonic() - started
    assert poll.error and "no complete answer within 2 s" in poll.error and not poll.frames
    assert took < 10


def test_a_name_lookup_that_hangs_costs_the_deadline(monkeypatch):
    """The resolver stuck (a DNS server that never answers) is injected: the exchange gives up at its
    deadline while the lookup is still held, instead of waiting out the resolver's own retries."""
    released, looked_up = threading.Event(), []
    real_getaddrinfo = socket.getaddrinfo

    def stuck(host, *args, **kwargs):
        if host != "stuck-dns.example":
            return real_getaddrinfo(host, *args, **kwargs)
        looked_up.append(host)
        released.wait(30)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", stuck)
    try:
        with pytest.raises(CollectError) as error:
            get_json("http://stuck-dns.example:9481", "/api/v1/diagnosis", timeout=1)
        assert looked_up and not released.is_set()     # gave up while the lookup was still held
    finally:
        released.set()
    assert str(error.value) == ("http://stuck-dns.example:9481/api/v1/diagnosis: could not collect: "
                                "no complete answer within 1 s")


def test_a_name_is_looked_up_and_connected_to():
    with tcp_server(http_answer(b'{"verdict": "ok"}')) as url:
        port = url.rsplit(":", 1)[1]
        assert get_json(f"http://localhost:{port}", "/api/v1/diagnosis", timeout=5) == {"verdict": "ok"}
