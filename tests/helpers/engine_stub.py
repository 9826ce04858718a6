"""An engine read from outside, stood up from an exposition fixture on loopback."""

import socket
from pathlib import Path

from tests.helpers.metrics_server import MetricsServer

FIXTURES = Path(__file__).parents[1] / "fixtures" / "engines"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


Engine = MetricsServer


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"    # nothing listens once the socket is closed


# --- attached from the command line: `serve` and `diagnose` with --engine vllm|sglang --engine-url ------------
DGX = str(Path(__file__).parents[1] / "fixtures" / "nvml" / "dgx_a100.json")
