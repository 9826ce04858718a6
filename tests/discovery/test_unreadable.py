"""A process whose sockets and environment discovery may not read (another user's, seen by an
unprivileged agent): found by its command line, its port from --port, and each denial said once,
never a traceback. The unprivileged agent is this test forked and turned `nobody`."""

from __future__ import annotations

import json
import os

import pytest

from stagelens.discovery import Discovery
from tests.helpers.fake_engines import FakeEngines, free_port

NOBODY = 65534


def _as_nobody(pids: list[int]) -> list[dict]:
    """Two refreshes of a discovery over `pids`, run by a forked child with the uid of nobody."""
    import psutil

    read, write = os.pipe()
    child = os.fork()
    if child == 0:      # pragma: no cover - the child
        try:
            os.close(read)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            found = Discovery(None, processes=lambda: [psutil.Process(p) for p in pids])
            os.write(write, json.dumps([found.refresh().to_dict(), found.refresh().to_dict()]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(child, 0)
    return json.loads(data)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: to run an engine nobody may look into")
def test_sockets_and_environment_not_readable_are_said_once(tmp_path):
    fakes = FakeEngines(tmp_path / "fakes")
    port = free_port()
    try:
        engine = fakes.start("vllm", "--port", str(port), env={"CUDA_VISIBLE_DEVICES": "0"})
        first, second = _as_nobody([engine.pid])
    finally:
        fakes.stop_all()
    [found] = first["engines"]
    assert (found["pid"], found["url"], found["gpus"]) == (engine.pid, f"http://127.0.0.1:{port}", None)
    assert found["how"].endswith(f"--port {port} on its command line (its sockets not readable)")
    said = [f"process {engine.pid}: sockets not readable (permission denied)",
            f"process {engine.pid}: environment not readable (permission denied): its GPUs unknown"]
    assert first["notes"] == said and found["notes"] == said
    assert second["notes"] == [] and second["engines"][0]["notes"] == said
