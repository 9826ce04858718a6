"""The agent as vLLM's OTLP traces endpoint: per-request evidence `/metrics` cannot give.

Started with `--otlp-traces-endpoint`, vLLM exports one `llm_request` span per finished request. An
`OtlpReceiver` listens for them:

- OTLP/HTTP `POST /v1/traces` (agent/sources/otlp/http.py; give vLLM `http_url + "/v1/traces"` with
  `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf`): protobuf (`application/x-protobuf`) or the
  OTLP JSON mapping (`application/json`, hex trace and span ids), optionally gzip-compressed. 200
  with an empty `ExportTraceServiceResponse` in the request's encoding; 400 for a body that does not
  parse, 408 for a body not received within `read_timeout_s` (all of it, not per read), 411 without
  a Content-Length (chunked bodies are refused), 413 past `max_body_bytes` (as sent or inflated) or
  past the bounds on spans and items in one request (agent/sources/otlp/decode.py), 415 for another
  content type or encoding, 503 (Retry-After) while `max_inflight_bytes` of bodies are already being
  received or the sending host already holds its share of them (3/4:
  engine_hooks/shared/fair_share.py), 404 for another path, 405 for another method. An error carries
  a one-line reason: a `google.rpc.Status` in the request's encoding where it has one (as the OTLP
  spec asks), else text. A refused body is read and discarded (up to DRAIN_BYTES) before the answer,
  so the client gets it. The listener has the agent's bounds: `max_connections` at once, 3/4 of them
  from one host (more: 503), and a request's headers due within `request_read_timeout_s` of the
  connection or of the previous answer (the main server's deadline: a kept-alive connection idle
  that long is closed too; `idle_timeout_s` caps each read); `stop()` closes them all.
- OTLP/gRPC (vLLM's default protocol) when `grpc_port` is not None (agent/sources/otlp/grpc.py):
  `TraceService/Export` on gRPC's asyncio server, a call's message due within `read_timeout_s`; a
  body that does not parse is answered INVALID_ARGUMENT, one too large RESOURCE_EXHAUSTED; past the
  calls in flight, or the byte budget it shares with OTLP/HTTP, or the host's share of either,
  UNAVAILABLE with a RetryInfo (exporters retry it).

One request is decoded at a time (the decoding is CPU under the GIL anyway): with the bounds on
bytes and items, what the intake can make the agent hold is bounded whatever is sent (see deploy/).

Every `llm_request` span becomes a RequestTimeline (agent/sources/otlp/llm_request_spans.py) kept in
a ring of `capacity` (the oldest dropped and counted); other spans are counted and ignored; a span
that cannot be read is dropped alone (counted), the rest of its request kept. Span times (epoch
nanoseconds) are converted to this process's monotonic clock with one offset, `time.monotonic() -
time.time()`, taken at `start()`: the engine and the agent must share a host clock, as they do on
one node.

With `forward_to` (an OTLP/HTTP traces URL, e.g. the site's collector), every accepted request body
is sent on unchanged (agent/sources/otlp/forward.py: same bytes, content type and encoding; a gRPC
one as the protobuf it carried) from a background thread through a queue bounded in bodies and
bytes: a slow or dead upstream never delays the answer to the engine; a body that does not fit is
dropped (counted).

`counts` is a plain dict of counters (COUNTERS), for a caller to publish as metrics: requests
received, `malformed` (answered 400) and `rejected` (408, 411, 413, 415, 503), `busy` (503: too many
bytes in flight), `busy_peer` (503 or UNAVAILABLE: the sending host held its share of bytes,
connections or calls); spans, `llm_request_spans`, `ignored_spans` (other names), `malformed_spans`
(an `llm_request` span without usable times, or one that cannot be read), `invalid_attributes`
(figures left unknown); `forwarded`, `forward_failed`, `forward_dropped` (the queue was full);
`timelines_dropped` (pushed out of the ring); `clients_gone` (an HTTP client that left before its
answer).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.engine_hooks.shared.bounded_http import MAX_CONNECTIONS, REQUEST_READ_TIMEOUT_S
from stagelens.engine_hooks.shared.fair_share import SHARE, FairShare
from stagelens.sources.otlp.decode import (
    JSON,
    RequestRejected,
    content_kind,
    inflate,
    one_line,
    parse,
)
from stagelens.sources.otlp.forward import MAX_QUEUED, MAX_QUEUED_BYTES, Forwarder
from stagelens.sources.otlp.grpc import GrpcIntake
from stagelens.sources.otlp.http import HttpIntake
from stagelens.sources.otlp.llm_request_spans import LLM_REQUEST, timeline_from_span

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024
# bodies being received or decoded at once, HTTP and gRPC together
MAX_INFLIGHT_BYTES = 8 * 1024 * 1024

COUNTERS = ("received_requests", "spans", "llm_request_spans", "ignored_spans", "malformed",
            "rejected", "busy", "busy_peer", "malformed_spans", "invalid_attributes", "forwarded",
            "forward_failed", "forward_dropped", "timelines_dropped", "clients_gone")


class OtlpReceiver:
    """An OTLP traces endpoint keeping vLLM's `llm_request` spans as request timelines: the intake
    (agent/sources/otlp/intake.py, SpanIntake) its HTTP and gRPC transports hand their bodies to."""

    def __init__(self, host: str = "127.0.0.1", http_port: int | None = 0,
                 grpc_port: int | None = None, forward_to: str | None = None, capacity: int = 2048,
                 *, max_body_bytes: int = MAX_BODY_BYTES, read_timeout_s: float = 10.0,
                 idle_timeout_s: float = 30.0, forward_queue: int = MAX_QUEUED,
                 forward_queue_bytes: int = MAX_QUEUED_BYTES, forward_timeout_s: float = 5.0,
                 max_inflight_bytes: int = MAX_INFLIGHT_BYTES,
                 max_connections: int = MAX_CONNECTIONS,
                 request_read_timeout_s: float = REQUEST_READ_TIMEOUT_S) -> None:
        if capacity < 1 or max_body_bytes < 1 or forward_queue < 1 or max_connections < 1:
            raise ValueError("capacity, max_body_bytes, forward_queue and max_connections must be at least 1")
        self.host = host
        self.max_body_bytes = max_body_bytes
        # one host's share must still take the largest body, or its sender would retry it for ever
        self.max_inflight_bytes = max(max_inflight_bytes, math.ceil(max_body_bytes / SHARE))
        self.bodies = FairShare(self.max_inflight_bytes)
        self.max_connections = max_connections
        self.read_timeout_s = read_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.request_read_timeout_s = request_read_timeout_s
        self.forward_to = forward_to
        self._forwarder = (Forwarder(forward_to, self.count, max_queued=forward_queue,
                                     max_queued_bytes=forward_queue_bytes,
                                     timeout_s=forward_timeout_s)
                           if forward_to is not None else None)
        self._http_port = http_port
        self._grpc_port = grpc_port
        self._lock = threading.Lock()
        # one request decoded at a time: bounds what decoding holds
        self._decoding = threading.Lock()
        self._timelines: deque[RequestTimeline] = deque(maxlen=capacity)
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._http: HttpIntake | None = None
        self._http_thread: threading.Thread | None = None
        self._grpc: GrpcIntake | None = None
        self._gone_before = 0                  # clients gone from listeners already stopped
        self.clock_offset = time.monotonic() - time.time()

    # -- life cycle

    def start(self) -> OtlpReceiver:
        if self._http is not None or self._grpc is not None:
            raise RuntimeError("the receiver is already started")
        self.clock_offset = time.monotonic() - time.time()
        try:
            if self._http_port is not None:
                self._http = HttpIntake((self.host, self._http_port), self)
                self._http_thread = threading.Thread(target=self._http.serve_forever,
                                                     kwargs={"poll_interval": 0.1},
                                                     name="otlp-http", daemon=True)
                self._http_thread.start()
            if self._grpc_port is not None:
                grpc = GrpcIntake(self, _url_host(self.host), self._grpc_port)
                grpc.start()
                self._grpc = grpc
            if self._forwarder is not None:
                self._forwarder.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._http is not None:
            if self._http_thread is not None:
                self._http.shutdown()
                self._http_thread.join(timeout=5)
            self._http.server_close()
            self._http.close_connections()
            self._gone_before += self._http.clients_gone
            self._http = self._http_thread = None
        if self._grpc is not None:
            self._grpc.stop()
            self._grpc = None
        if self._forwarder is not None:
            self._forwarder.stop()

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def http_url(self) -> str | None:
        """The base URL (`http://HOST:PORT`); the engine exports to it plus `/v1/traces`."""
        if self._http is None:
            return None
        host, port = self._http.server_address[:2]
        assert isinstance(host, str)   # a TCP listener's address (bytes only for AF_UNIX)
        return f"http://{_url_host(host)}:{port}"

    @property
    def grpc_address(self) -> str | None:
        """`HOST:PORT` of the gRPC endpoint, None without one."""
        return f"{_url_host(self.host)}:{self._grpc.port}" if self._grpc is not None else None

    # -- what it collected

    @property
    def counts(self) -> dict[str, int]:
        with self._lock:
            counts = dict(self._counts)
        counts["clients_gone"] += self._gone_before + (self._http.clients_gone if self._http is not None else 0)
        return counts

    @property
    def bytes_in_flight(self) -> int:
        """Body bytes being received or decoded now (at most `max_inflight_bytes`)."""
        return self.bodies.held

    def hold_bytes(self, peer: str, n: int) -> None:
        """Holds `n` body bytes for the sending host `peer` (give them back with `bodies.give`);
        RequestRejected 503, counted `busy` or `busy_peer`, when the budget or the host's share
        of it is spent."""
        refused = self.bodies.take(peer, n)
        if refused is None:
            return
        self.count(refused)
        whose = "this host's share of " if refused == "busy_peer" else ""
        raise RequestRejected(503, f"busy: {whose}{self.bodies.limit} bytes of traces already in flight; retry")

    @property
    def forward_queued_bytes(self) -> int:
        """Bytes waiting to be forwarded (at most `forward_queue_bytes`); 0 without forwarding."""
        return self._forwarder.queued_bytes if self._forwarder is not None else 0

    def recent_timelines(self, since: float | None = None) -> list[RequestTimeline]:
        """The kept timelines that finished after `since` (this process's monotonic seconds), by
        finish."""
        with self._lock:
            kept = [t for t in self._timelines if since is None or (t.finished is not None and t.finished > since)]
        return sorted(kept, key=lambda t: t.finished or 0.0)

    # -- receiving

    def ingest(self, body: bytes, content_type: str, encoding: str | None = None) -> bytes:
        """One OTLP request body: decoded, its spans kept, forwarded; the answer's body. Raises
        `RequestRejected` with the HTTP status and a one-line reason when it cannot be accepted."""
        self.count("received_requests")
        try:
            return self.accept(body, content_type, encoding)
        except RequestRejected as e:
            self.rejected(e)
            raise

    def rejected(self, e: RequestRejected) -> None:
        self.count("malformed" if e.status == 400 else "rejected")

    def accept(self, body: bytes, content_type: str, encoding: str | None) -> bytes:
        """`ingest` for a request already counted as received."""
        kind = content_kind(content_type)
        with self._decoding:
            request = parse(inflate(body, encoding, self.max_body_bytes), kind)
            self._keep(request)
            del request
        if self._forwarder is not None:
            self._forwarder.put(body, content_type, encoding)
        if kind == JSON:
            return b"{}"
        return trace_service_pb2.ExportTraceServiceResponse().SerializeToString()

    def _keep(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        spans = llm = ignored = bad = invalid = 0
        timelines: list[RequestTimeline] = []
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans += 1
                    if span.name != LLM_REQUEST:
                        ignored += 1
                        continue
                    llm += 1
                    problems: list[str] = []
                    try:
                        tl = timeline_from_span(span, self.clock_offset, problems)
                    # one span's oddity (finish reasons nested 100,000 deep) is its own
                    except Exception as e:
                        log.debug("llm_request span dropped: %s", one_line(e))
                        tl, problems = None, []
                    invalid += len(problems) if tl is not None else 0
                    if tl is None:
                        bad += 1
                    else:
                        timelines.append(tl)
        with self._lock:
            c = self._counts
            c["spans"] += spans
            c["llm_request_spans"] += llm
            c["ignored_spans"] += ignored
            c["malformed_spans"] += bad
            c["invalid_attributes"] += invalid
            maxlen = self._timelines.maxlen or 0
            c["timelines_dropped"] += max(0, len(self._timelines) + len(timelines) - maxlen)
            self._timelines.extend(timelines)

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
