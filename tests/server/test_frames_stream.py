"""`GET /api/v1/frames` of a long history (issue 39, item 2): the answer is streamed, so what one request costs
the agent in memory does not grow with the history, and only a few such reads run at once. A real uvicorn
on loopback serves a real runtime's history of 8-GPU frames; a raw socket reads the answer and drops it."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import tracemalloc

import pytest
import uvicorn

from stagelens.runtime import AgentRuntime
from stagelens.server.app import create_app
from stagelens.server.frames_stream import CHUNK_BYTES, MAX_HEAVY_READS, HeavyReads, frames_chunks
from tests.helpers.raw_get import get_dropping
from tests.helpers.serve_api import DGX, _free_port, _wait


@pytest.fixture(scope="module")
def agent():
    """A runtime whose history holds 400 frames of the DGX snapshot (some 50 KB of JSON each), served."""
    runtime = AgentRuntime(nvml_snapshot=DGX, history=400)
    for _ in range(400):
        runtime.sampler.tick()
    for frame in runtime.frames(None):
        frame.to_dict()       # a node sample's JSON is made at its first read and kept with the history
    app = create_app(runtime)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    _wait(lambda: server.started)
    yield app, port
    server.should_exit = True
    thread.join(timeout=10)
    runtime.stop()


def _read(port: int, path: str) -> tuple[int, dict, bytes]:
    """(status, headers, body) of GET `path`."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def _peak_of_one_read(port: int, limit: int) -> tuple[int, int]:
    """(tracemalloc's peak over one read of `limit` frames, the answer's length in bytes)."""
    tracemalloc.start()
    try:
        _, size = get_dropping(port, f"/api/v1/frames?limit={limit}")
        return tracemalloc.get_traced_memory()[1], size
    finally:
        tracemalloc.stop()


def test_a_long_history_read_costs_about_a_chunk_not_the_history(agent):
    """400 frames of an 8-GPU node are ~20 MB of JSON: the whole answer built in memory (before) peaked at
    several times that. Streamed, the peak is a few chunks and frames, the same for 50 frames or 400."""
    _, port = agent
    small_peak, small_size = _peak_of_one_read(port, 50)
    large_peak, large_size = _peak_of_one_read(port, 400)
    frame_bytes = large_size / 400
    assert large_size > 7 * small_size and large_size > 10_000_000, (small_size, large_size)
    bound = 8 * (CHUNK_BYTES + frame_bytes)
    assert large_peak < bound, f"one read of 400 frames peaked at {large_peak} bytes (bound {bound:.0f})"
    assert large_peak < small_peak + 4 * (CHUNK_BYTES + frame_bytes), (small_peak, large_peak)


def test_the_streamed_answer_is_the_frames_as_before(agent):
    app, port = agent
    status, headers, body = _read(port, "/api/v1/frames?limit=300")
    assert status == 200 and headers["content-type"] == "application/json"
    frames = json.loads(body)
    expected = [f.to_dict() for f in app.state.runtime.frames(None)[-300:]]
    assert len(frames) == 300 and frames == json.loads(json.dumps(expected))
    _, _, few = _read(port, "/api/v1/frames?limit=1")
    assert json.loads(few) == json.loads(json.dumps(expected[-1:]))
    _, _, none = _read(port, f"/api/v1/frames?since={expected[-1]['time_unix']}")
    assert json.loads(none) == []


def test_only_a_few_long_reads_run_at_once_and_a_place_is_given_back_when_a_reader_leaves(agent):
    """Readers that never read hold their places while they stay; the next long read is a 503 with Retry-After,
    a short read (the TUI's 120 frames) is still served, and a reader that leaves gives its place back."""
    app, port = agent
    stalled = []
    for _ in range(MAX_HEAVY_READS):
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /api/v1/frames?limit=400 HTTP/1.1\r\nhost: x\r\n\r\n")
        stalled.append(sock)
    _wait(lambda: app.state.heavy_reads.now == MAX_HEAVY_READS)
    status, headers, body = _read(port, "/api/v1/frames?limit=400")
    assert status == 503 and headers["retry-after"] == "1", (status, headers)
    assert f"at most {MAX_HEAVY_READS} at once" in json.loads(body)["detail"]
    assert app.state.heavy_reads.refused >= 1
    status, _, body = _read(port, "/api/v1/frames")
    assert status == 200 and len(json.loads(body)) == 120
    for sock in stalled:
        sock.close()
    _wait(lambda: app.state.heavy_reads.now == 0)
    head, _ = get_dropping(port, "/api/v1/frames?limit=400", read_at_most=100_000)
    assert head.startswith(b"HTTP/1.1 200")
    _wait(lambda: app.state.heavy_reads.now == 0)


def test_long_reads_together_are_sent_at_a_bounded_rate_however_often_they_come(agent):
    """Two whole histories read at once, on a clock of our own: the encoder waits its turn for each chunk, so
    the reads together take their bytes over the rate, whatever the client (before: as fast as a core
    encodes, ~80 MB a second; a client looping over whole histories held a core)."""
    app, _ = agent
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    heavy = HeavyReads(bytes_per_s=1 << 20, clock=lambda: now[0], sleep=sleep)
    frames = app.state.runtime.frames(None)
    reads = [frames_chunks(frames, heavy.pace), frames_chunks(frames, heavy.pace)]
    sent = 0
    while reads:
        for read in list(reads):
            piece = next(read, None)
            if piece is None:
                reads.remove(read)
            else:
                sent += len(piece)
    last_chunks = 2 * (CHUNK_BYTES + len(json.dumps(frames[-1].to_dict())))   # each read's last is not paced
    assert sent > 30_000_000
    assert (sent - last_chunks) / (1 << 20) <= now[0] <= sent / (1 << 20), (sent, now[0])
