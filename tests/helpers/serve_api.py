"""The node snapshot serve's tests run on, a free port, and waiting for a server to answer."""

import socket
import time
from pathlib import Path

DGX = str(Path(__file__).parents[1] / "fixtures" / "nvml" / "dgx_a100.json")


def _wait(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
