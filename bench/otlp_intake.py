"""Hostile OTLP intake against a real `stagelens serve --engine vllm` (issue 24 item 1): what the agent's
memory and its `/metrics` latency do while it is sent the messages that took it out of its limits.

    python bench/otlp_intake.py [--json] [--rounds N] [--stagelens "CMD ..."]

The agent reads a stand-in vLLM (the exposition fixture served on loopback) and receives traces over
OTLP/HTTP and OTLP/gRPC. In turn (`--rounds` times): a 4 MiB gRPC Export of 2M empty spans, then 8
concurrent gRPC senders of it; 8 concurrent HTTP senders of the same body as protobuf; 1.4M empty spans
in the OTLP JSON form (4 MiB too); then normal vLLM-sized batches (512 spans), which must still be taken.
`/metrics` is scraped every 0.1 s throughout. Prints the agent's RSS at start and its peak (VmHWM, the
kernel's high-water mark over the whole run), the `/metrics` p99 and max, the answers by status, and the
normal batches taken.

`--stagelens` runs another build of the agent (e.g. a checkout of an older commit) for a before/after.
Prints figures; never pass/fail.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _agent import wait_for_route  # noqa: E402  (bench/ is the script's own directory)
from _report import emit, free_port  # noqa: E402

DGX = str(ROOT / "tests" / "fixtures" / "nvml" / "dgx_a100.json")
EXPOSITION = (ROOT / "tests" / "fixtures" / "engines" / "vllm_v1_new_names.txt").read_bytes()
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
EMPTY_SPANS = 2_000_000                  # 4 MiB as protobuf, 2 bytes each
JSON_SPANS = ((4 << 20) - 64) // 3      # 4 MiB as JSON, "{}," each
SENDERS = 8
ANSWER_TIMEOUT_S = 120.0


def _wire(field: int, payload: bytes) -> bytes:
    from google.protobuf.internal.encoder import _VarintBytes

    return _VarintBytes(field << 3 | 2) + _VarintBytes(len(payload)) + payload


def empty_spans_protobuf(n: int) -> bytes:
    """resource_spans { scope_spans { spans {} x n } }: 2 bytes a span."""
    return _wire(1, _wire(2, _wire(2, b"") * n))


def empty_spans_json(n: int) -> bytes:
    return b'{"resourceSpans": [{"scopeSpans": [{"spans": [' + b",".join([b"{}"] * n) + b"]}]}]}"


def normal_batch(spans: int = 512) -> bytes:
    """A batch as vLLM's exporter sends it: `spans` llm_request spans with vLLM's attributes."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.common.v1 import common_pb2

    request = trace_service_pb2.ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    now = time.time_ns()
    for i in range(spans):
        span = scope.spans.add(name="llm_request", trace_id=os.urandom(16), span_id=os.urandom(8),
                               start_time_unix_nano=now - 2_000_000_000, end_time_unix_nano=now)
        for key, value in (("gen_ai.request.id", common_pb2.AnyValue(string_value=f"cmpl-{i}")),
                           ("gen_ai.usage.prompt_tokens", common_pb2.AnyValue(int_value=512)),
                           ("gen_ai.usage.completion_tokens", common_pb2.AnyValue(int_value=64)),
                           ("gen_ai.latency.time_in_queue", common_pb2.AnyValue(double_value=0.25)),
                           ("gen_ai.latency.time_to_first_token", common_pb2.AnyValue(double_value=0.4)),
                           ("gen_ai.latency.e2e", common_pb2.AnyValue(double_value=1.5))):
            span.attributes.add(key=key, value=value)
    return request.SerializeToString()


class _Engine(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(EXPOSITION)))
                self.end_headers()
                self.wfile.write(EXPOSITION)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def _status(pid: int, field: str) -> float:
    """A `/proc/PID/status` figure in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


class _Scraper(threading.Thread):
    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.latencies, self.failures = url, [], 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=30) as answer:
                    answer.read()
                self.latencies.append(time.perf_counter() - t0)
            except OSError:
                self.failures += 1
            self.stopping.wait(0.1)


def _post(url: str, body: bytes, content_type: str, timeout: float = ANSWER_TIMEOUT_S) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0                    # no answer: reset, or no answer in time


def _grpc_export(address: str, body: bytes, timeout: float = ANSWER_TIMEOUT_S, max_send_bytes: int = 8 << 20) -> str:
    import grpc

    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", max_send_bytes)]) as channel:
        try:
            channel.unary_unary(EXPORT)(body, timeout=timeout)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name


def run(rounds: int, stagelens: list[str]) -> dict:
    engine = _Engine()
    port, http_port, grpc_port = free_port(), free_port(), free_port()
    log = tempfile.NamedTemporaryFile(prefix="otlp-intake-", suffix=".log", delete=False)  # noqa: SIM115
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    agent = subprocess.Popen([*stagelens, "--nvml-snapshot", DGX, "serve", "--listen", f"127.0.0.1:{port}",
                              "--engine", "vllm", "--engine-url", f"http://127.0.0.1:{engine.server_address[1]}",
                              "--otlp-receiver", f"127.0.0.1:{http_port}",
                              "--otlp-receiver-grpc", f"127.0.0.1:{grpc_port}", "--interval", "1"],
                             stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    traces = f"http://127.0.0.1:{http_port}/v1/traces"
    grpc_address = f"127.0.0.1:{grpc_port}"
    try:
        wait_for_route(base, "/readyz", agent, deadline_s=60)
        rss_start = _status(agent.pid, "VmRSS")
        scraper = _Scraper(base + "/metrics")
        scraper.start()
        hostile_pb, normal = empty_spans_protobuf(EMPTY_SPANS), normal_batch()
        hostile_json = empty_spans_json(JSON_SPANS)
        answers: Counter = Counter()
        normal_taken = normal_sent = 0
        t0 = time.monotonic()
        for _ in range(rounds):
            answers[f"grpc_2m_empty_spans_{_grpc_export(grpc_address, hostile_pb)}"] += 1
            with concurrent.futures.ThreadPoolExecutor(SENDERS) as pool:
                for code in pool.map(lambda _: _grpc_export(grpc_address, hostile_pb), range(SENDERS)):
                    answers[f"grpc_concurrent_{code}"] += 1
            with concurrent.futures.ThreadPoolExecutor(SENDERS) as pool:
                for status in pool.map(lambda _: _post(traces, hostile_pb, "application/x-protobuf"), range(SENDERS)):
                    answers[f"http_protobuf_{status}"] += 1
            answers[f"http_json_{_post(traces, hostile_json, 'application/json')}"] += 1
            normal_sent += 2
            normal_taken += _grpc_export(grpc_address, normal) == "OK"
            normal_taken += _post(traces, normal, "application/x-protobuf") == 200
        elapsed = time.monotonic() - t0
        scraper.stopping.set()
        scraper.join()
        rss_peak = _status(agent.pid, "VmHWM")
        lat = sorted(scraper.latencies)
        figures = {
            "rounds": rounds,
            "rss_start_mb": round(rss_start, 1),
            "rss_peak_mb": round(rss_peak, 1),
            "rss_end_mb": round(_status(agent.pid, "VmRSS"), 1),
            "metrics_scrapes": len(lat),
            "metrics_failed": scraper.failures,
            "metrics_p50_ms": round(statistics.median(lat) * 1e3, 2) if lat else None,
            "metrics_p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3, 2) if lat else None,
            "metrics_max_ms": round(lat[-1] * 1e3, 2) if lat else None,
            "normal_batches_taken": f"{normal_taken}/{normal_sent}",
            "seconds": round(elapsed, 1),
            **{f"answers.{k}": v for k, v in sorted(answers.items())},
            "agent_alive": agent.poll() is None,
        }
        return figures
    finally:
        with contextlib.suppress(ProcessLookupError):
            agent.terminate()
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
        engine.shutdown()
        log.close()
        os.unlink(log.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--stagelens", help="the command that runs the agent (default: this checkout's)")
    args = parser.parse_args()
    command = (shlex.split(args.stagelens) if args.stagelens
               else [sys.executable, "-c", "from stagelens.cli import main; main()"])
    emit(run(args.rounds, command), args.json)


if __name__ == "__main__":
    main()
