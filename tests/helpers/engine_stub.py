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


def read_with_spans(engine: Engine, spans: list, bodies: list[str] | None = None) -> tuple:
    """(a vLLM source that received `spans` (finished SDK spans, as vLLM exports them) and scraped `bodies` (two:
    by default the vllm_v1_new_names fixture) a window apart; the second scrape's snapshot)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from stagelens.engine_hooks.records.snapshot import WINDOW_S
    from stagelens.sources.otlp.receiver import OtlpReceiver
    from stagelens.sources.scrape.engine_source import VllmSource

    receiver = OtlpReceiver()
    receiver.ingest(encode_spans(spans).SerializeToString(), "application/x-protobuf")
    source = VllmSource(engine.url, timeout_s=2.0, spans=receiver)
    first, second = bodies or (fixture("vllm_v1_new_names.txt"), fixture("vllm_v1_new_names.next.txt"))
    engine.body = first
    source.snapshot(100.0)
    engine.body = second
    return source, source.snapshot(100.0 + WINDOW_S)
