"""Shared pieces of the tracing tests (no tests here): hand-built timelines, receivers, env hygiene."""

from __future__ import annotations

import gzip
import socket
import threading
import zlib
from concurrent import futures
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from stagelens.engine_hooks.records.timeline import PrefillChunk, RequestTimeline, Wait
from stagelens.tracing import ClockOffset

OFFSET = ClockOffset(1_700_000_000 * 10**9)   # fixed: epoch = monotonic + 1.7e9 s

OTEL_VARS = ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_EXPORTER", "OTEL_TRACES_SAMPLER",
             "OTEL_TRACES_SAMPLER_ARG", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
             "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_TIMEOUT",
             "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_COMPRESSION",
             "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_SDK_DISABLED")


def clear_otel_env(monkeypatch) -> None:
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)


def preempted_timeline(request_id: str = "req-1") -> RequestTimeline:
    """Queued at a step boundary, then behind a long prefill; prefilled, first token, preempted after its
    first token, waited, recomputed and decoded to the end."""
    return RequestTimeline(
        request_id=request_id, model="lab-7b", prompt_tokens=512, output_tokens=64,
        arrival=100.0, finished=100.5, finish_reason="length", first_token=100.045,
        events=[(100.0, "arrival"), (100.03, "scheduled"), (100.045, "first_token"), (100.1, "preempted"),
                (100.2, "resumed"), (100.5, "finished")],
        chunks=[PrefillChunk(100.03, 100.037, 256, 8), PrefillChunk(100.037, 100.045, 256, 9),
                PrefillChunk(100.2, 100.22, 560, 31)],
        waits=[Wait(100.0, 100.01, "step_boundary"), Wait(100.01, 100.03, "behind_long_prefill", 7, "req-long"),
               Wait(100.1, 100.2, "preempted")],
        preemptions=1,
    )


def small_timeline(request_id: str, t0: float = 10.0) -> RequestTimeline:
    """Four spans: root, one wait, one chunk, decode."""
    return RequestTimeline(
        request_id=request_id, model="lab-1b", prompt_tokens=32, output_tokens=4,
        arrival=t0, finished=t0 + 0.05, finish_reason="stop", first_token=t0 + 0.02,
        events=[(t0, "arrival"), (t0 + 0.01, "scheduled"), (t0 + 0.02, "first_token"), (t0 + 0.05, "finished")],
        chunks=[PrefillChunk(t0 + 0.01, t0 + 0.02, 32, 1)],
        waits=[Wait(t0, t0 + 0.01, "max_num_seqs")],
    )


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _decode(body: bytes, encoding: str | None) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    return body


class OtlpHttpReceiver:
    """POST /v1/traces on 127.0.0.1:<random>, parsed as ExportTraceServiceRequest.

    `hold=True`: each request waits for `release` (or 10 s) before answering, to play a slow collector.
    """

    def __init__(self, hold: bool = False) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.got_request = threading.Event()
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = _decode(self.rfile.read(int(self.headers.get("Content-Length", 0))),
                               self.headers.get("Content-Encoding"))
                receiver.paths.append(self.path)
                receiver.got_request.set()
                if hold:
                    receiver.release.wait(10)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                req = trace_service_pb2.ExportTraceServiceRequest()
                req.ParseFromString(body)
                receiver.requests.append(req)
                out = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except OSError:   # a client that timed out on a held request has gone
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: list) -> None:
        self.sink = sink

    def Export(self, request, context):  # noqa: N802 - the generated service's naming
        self.sink.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()


@contextmanager
def otlp_grpc_receiver():
    """An in-process OTLP/gRPC TraceService on 127.0.0.1:<random>; yields (endpoint, received requests)."""
    import grpc

    received: list = []
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(received), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.stop(0)


def otlp_spans(requests) -> list:
    """Every span in the received export requests, with its resource attributes as `.resource`."""
    out = []
    for req in requests:
        for rs in req.resource_spans:
            resource = {kv.key: any_value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for span in ss.spans:
                    out.append((span, resource))
    return out


def any_value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def otlp_attributes(span) -> dict:
    return {kv.key: any_value(kv.value) for kv in span.attributes}
