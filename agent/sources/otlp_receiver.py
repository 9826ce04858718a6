"""The agent as vLLM's OTLP traces endpoint: per-request evidence `/metrics` cannot give.

Started with `--otlp-traces-endpoint`, vLLM exports one `llm_request` span per finished request. An
`OtlpReceiver` listens for them:

- OTLP/HTTP `POST /v1/traces` (give vLLM `http_url + "/v1/traces"` with
  `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf`): protobuf (`application/x-protobuf`) or the OTLP
  JSON mapping (`application/json`, hex trace and span ids), optionally gzip-compressed. 200 with an empty
  `ExportTraceServiceResponse` in the request's encoding; 400 for a body that does not parse, 408 for a
  body not received within `read_timeout_s` (all of it, not per read), 411 without a Content-Length
  (chunked bodies are refused), 413 past `max_body_bytes` (as sent or inflated), 415 for another content
  type or encoding, 404 for another path, 405 for another method. An error carries a one-line reason: a
  `google.rpc.Status` in the request's encoding where it has one (as the OTLP spec asks), else text. A
  refused body is read and discarded (up to DRAIN_BYTES) before the answer, so the client gets it; a
  connection idle for `idle_timeout_s` is closed, and `stop()` closes them all.
- OTLP/gRPC (vLLM's default protocol) when `grpc_port` is not None: `TraceService/Export` on a small
  thread pool (`grpc_address`); a body that does not parse is answered INVALID_ARGUMENT.

Every `llm_request` span becomes a RequestTimeline (agent/sources/llm_request_spans.py) kept in a ring
of `capacity` (the oldest dropped and counted); other spans are counted and ignored. Span times (epoch
nanoseconds) are converted to this process's monotonic clock with one offset, `time.monotonic() -
time.time()`, taken at `start()`: the engine and the agent must share a host clock, as they do on one node.

With `forward_to` (an OTLP/HTTP traces URL, e.g. the site's collector), every accepted request body is
sent on unchanged (same bytes, content type and encoding; a gRPC one as the protobuf it carried) from a
background thread through a bounded queue: a slow or dead upstream never delays the answer to the
engine; a full queue drops the body (counted).

`counts` is a plain dict of counters (COUNTERS), for a caller to publish as metrics: requests received,
`malformed` (answered 400) and `rejected` (408, 411, 413, 415); spans, `llm_request_spans`, `ignored_spans`
(other names), `malformed_spans` (an `llm_request` span without usable times), `invalid_attributes`
(figures left unknown); `forwarded`, `forward_failed`, `forward_dropped` (the queue was full);
`timelines_dropped` (pushed out of the ring).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import queue
import socket
import threading
import time
import urllib.parse
import zlib
from collections import deque
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from agent.remote import EXCHANGE_ERRORS, request
from agent.sources.llm_request_spans import LLM_REQUEST, timeline_from_span
from engine_hooks.timeline import RequestTimeline

log = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
GRPC_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
MAX_BODY_BYTES = 4 * 1024 * 1024
DRAIN_BYTES = 16 * 1024 * 1024      # a refused body up to this size is read and discarded before the answer
FORWARD_ANSWER_BYTES = 1024 * 1024  # an upstream's answer past this counts as a failed forward

COUNTERS = ("received_requests", "spans", "llm_request_spans", "ignored_spans", "malformed", "rejected",
            "malformed_spans", "invalid_attributes", "forwarded", "forward_failed", "forward_dropped",
            "timelines_dropped")

# google.rpc.Code of an HTTP answer's Status body
_RPC_CODE = {400: 3, 408: 4, 411: 3, 413: 8, 415: 3}       # INVALID_ARGUMENT, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED


class RequestRejected(Exception):
    """A request answered with an error status and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class OtlpReceiver:
    """An OTLP traces endpoint keeping vLLM's `llm_request` spans as request timelines."""

    def __init__(self, host: str = "127.0.0.1", http_port: int | None = 0, grpc_port: int | None = None,
                 forward_to: str | None = None, capacity: int = 2048, *, max_body_bytes: int = MAX_BODY_BYTES,
                 read_timeout_s: float = 10.0, idle_timeout_s: float = 30.0, forward_queue: int = 256,
                 forward_timeout_s: float = 5.0) -> None:
        if capacity < 1 or max_body_bytes < 1 or forward_queue < 1:
            raise ValueError("capacity, max_body_bytes and forward_queue must be at least 1")
        self._forward_parts = _forward_parts(forward_to) if forward_to is not None else None
        self.host = host
        self.max_body_bytes = max_body_bytes
        self.read_timeout_s = read_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.forward_to = forward_to
        self.forward_timeout_s = forward_timeout_s
        self._http_port = http_port
        self._grpc_port = grpc_port
        self._lock = threading.Lock()
        self._timelines: deque[RequestTimeline] = deque(maxlen=capacity)
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._forward_queue: queue.Queue[tuple[bytes, str, str | None]] = queue.Queue(maxsize=forward_queue)
        self._stopping = threading.Event()
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._grpc = None
        self._grpc_bound: int | None = None
        self._forward_thread: threading.Thread | None = None
        self.clock_offset = time.monotonic() - time.time()

    # -- life cycle

    def start(self) -> OtlpReceiver:
        if self._http is not None or self._grpc is not None:
            raise RuntimeError("the receiver is already started")
        self.clock_offset = time.monotonic() - time.time()
        self._stopping.clear()
        try:
            if self._http_port is not None:
                self._http = _HttpServer((self.host, self._http_port), _Handler, self)
                self._http_thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.1},
                                                     name="otlp-http", daemon=True)
                self._http_thread.start()
            if self._grpc_port is not None:
                self._start_grpc()
            if self.forward_to is not None:
                self._forward_thread = threading.Thread(target=self._forward_loop, name="otlp-forward", daemon=True)
                self._forward_thread.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._http is not None:
            if self._http_thread is not None:
                self._http.shutdown()
                self._http_thread.join(timeout=5)
            self._http.server_close()
            self._http.close_connections()
            self._http = self._http_thread = None
        if self._grpc is not None:
            self._grpc.stop(grace=0.5).wait(timeout=5)
            self._grpc = self._grpc_bound = None
        if self._forward_thread is not None:
            self._forward_thread.join(timeout=self.forward_timeout_s + 1)
            self._forward_thread = None

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
        return f"http://{_url_host(host)}:{port}"

    @property
    def grpc_address(self) -> str | None:
        """`HOST:PORT` of the gRPC endpoint, None without one."""
        return f"{_url_host(self.host)}:{self._grpc_bound}" if self._grpc_bound is not None else None

    # -- what it collected

    @property
    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def recent_timelines(self, since: float | None = None) -> list[RequestTimeline]:
        """The kept timelines that finished after `since` (this process's monotonic seconds), by finish."""
        with self._lock:
            kept = [t for t in self._timelines if since is None or (t.finished is not None and t.finished > since)]
        return sorted(kept, key=lambda t: t.finished or 0.0)

    # -- receiving

    def ingest(self, body: bytes, content_type: str, encoding: str | None = None) -> bytes:
        """One OTLP request body: decoded, its spans kept, forwarded; the answer's body. Raises `RequestRejected`
        with the HTTP status and a one-line reason when it cannot be accepted."""
        self._count("received_requests")
        try:
            return self._ingest(body, content_type, encoding)
        except RequestRejected as e:
            self._rejected(e)
            raise

    def _rejected(self, e: RequestRejected) -> None:
        self._count("malformed" if e.status == 400 else "rejected")

    def _ingest(self, body: bytes, content_type: str, encoding: str | None) -> bytes:
        kind = _content_kind(content_type)
        request = _parse(self._decode(body, encoding), kind)
        self._keep(request)
        self._forward(body, content_type, encoding)
        if kind == JSON:
            return b"{}"
        return trace_service_pb2.ExportTraceServiceResponse().SerializeToString()

    def _decode(self, body: bytes, encoding: str | None) -> bytes:
        coding = (encoding or "identity").strip().lower()
        if coding == "identity":
            return body
        if coding not in ("gzip", "x-gzip"):
            raise RequestRejected(415, f"unsupported Content-Encoding {encoding!r} (gzip or none)")
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            out = inflater.decompress(body, self.max_body_bytes + 1)
            if len(out) > self.max_body_bytes:
                raise RequestRejected(413, f"decompressed body exceeds {self.max_body_bytes} bytes")
            if not inflater.eof:
                raise RequestRejected(400, "truncated gzip body")
        except zlib.error as e:
            raise RequestRejected(400, f"bad gzip body: {e}") from None
        return out

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
                    except Exception as e:     # one span's oddity (finish reasons nested 100,000 deep) is its own
                        log.debug("llm_request span dropped: %s", _one_line(e))
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

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    # -- forwarding

    def _forward(self, body: bytes, content_type: str, encoding: str | None) -> None:
        if self.forward_to is None:
            return
        try:
            self._forward_queue.put_nowait((body, content_type, encoding))
        except queue.Full:
            self._count("forward_dropped")

    def _forward_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                body, content_type, encoding = self._forward_queue.get(timeout=0.1)
            except queue.Empty:
                continue
            headers = {"Content-Type": content_type}
            if encoding:
                headers["Content-Encoding"] = encoding
            parts = self._forward_parts
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            # one deadline for the whole exchange, name lookup included
            deadline = time.monotonic() + self.forward_timeout_s
            try:
                status, reason, _ = request("POST", parts, target, headers, deadline, FORWARD_ANSWER_BYTES, body)
            except EXCHANGE_ERRORS as e:
                self._count("forward_failed")
                log.debug("forwarding to %s failed: %s", self.forward_to, str(e) or type(e).__name__)
                continue
            if 200 <= status < 300:
                self._count("forwarded")
            else:
                self._count("forward_failed")
                log.debug("forwarding to %s failed: HTTP %s %s", self.forward_to, status, reason)

    # -- gRPC

    def _start_grpc(self) -> None:
        import grpc

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-grpc"),
                             options=[("grpc.max_receive_message_length", self.max_body_bytes)])
        # bytes in and out (no deserializer): a body that does not parse is counted and answered
        # INVALID_ARGUMENT here, and the very bytes received are what is forwarded
        handler = grpc.unary_unary_rpc_method_handler(self._grpc_export)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(GRPC_SERVICE, {"Export": handler}),))
        bound = server.add_insecure_port(f"{_url_host(self.host)}:{self._grpc_port}")
        if not bound:
            raise OSError(f"cannot listen for OTLP/gRPC on {self.host}:{self._grpc_port}")
        server.start()
        self._grpc, self._grpc_bound = server, bound

    def _grpc_export(self, body: bytes, context) -> bytes:
        import grpc

        try:
            return self.ingest(body, PROTOBUF)
        except RequestRejected as e:
            code = grpc.StatusCode.RESOURCE_EXHAUSTED if e.status == 413 else grpc.StatusCode.INVALID_ARGUMENT
            context.abort(code, e.reason)
        return b""     # not reached: abort raises


def _forward_parts(url: str) -> urllib.parse.SplitResult:
    """An OTLP/HTTP URL split; ValueError for one that is not (no http(s) scheme, no host, a bad port)."""
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port    # noqa: B018  (reading it checks it)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"forward_to must be an OTLP/HTTP URL, not {url!r}")
    return parts


def _content_kind(content_type: str | None) -> str:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in (PROTOBUF, "application/protobuf"):
        return PROTOBUF
    if media == JSON:
        return JSON
    raise RequestRejected(415, f"unsupported Content-Type {content_type!r} ({PROTOBUF} or {JSON})")


def _parse(payload: bytes, kind: str) -> trace_service_pb2.ExportTraceServiceRequest:
    request = trace_service_pb2.ExportTraceServiceRequest()
    if kind == PROTOBUF:
        try:
            request.ParseFromString(payload)
        except (DecodeError, ValueError, RuntimeError) as e:
            raise RequestRejected(400, f"body is not an OTLP ExportTraceServiceRequest: {_one_line(e)}") from None
        return request
    try:
        doc = json.loads(payload)
    except (ValueError, RecursionError) as e:
        raise RequestRejected(400, f"body is not JSON: {_one_line(e)}") from None
    if not isinstance(doc, dict):
        raise RequestRejected(400, "body is not an OTLP ExportTraceServiceRequest: not a JSON object")
    try:
        _hex_ids_to_base64(doc)
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError) as e:
        raise RequestRejected(400, f"body is not an OTLP ExportTraceServiceRequest: {_one_line(e)}") from None
    return request


_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _hex_ids_to_base64(doc: dict) -> None:
    """OTLP/JSON writes trace and span ids in hex; protobuf's JSON mapping reads bytes as base64."""
    for rs in _items(doc, "resourceSpans", "resource_spans"):
        for ss in _items(rs, "scopeSpans", "scope_spans"):
            for span in _items(ss, "spans"):
                _convert_ids(span)
                for link in _items(span, "links"):
                    _convert_ids(link)


def _items(obj, *keys: str) -> list:
    if not isinstance(obj, dict):
        return []
    for key in keys:
        value = obj.get(key)
        if isinstance(value, list):
            return value
    return []


def _convert_ids(obj) -> None:
    if not isinstance(obj, dict):
        return
    for key in _ID_FIELDS:
        value = obj.get(key)
        if isinstance(value, str) and len(value) in (16, 32):
            # not hex: left to be read as base64 (protobuf's own mapping), which some exporters send
            with contextlib.suppress(ValueError):
                obj[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:200] or type(e).__name__


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _error_body(status: int, kind: str | None, reason: str) -> tuple[bytes, str]:
    """A google.rpc.Status in the request's encoding (as the OTLP spec asks), else one line of text."""
    code = _RPC_CODE.get(status, 13)        # INTERNAL
    if kind == JSON:
        return json.dumps({"code": code, "message": reason}).encode() + b"\n", JSON
    if kind == PROTOBUF:
        try:
            from google.rpc import status_pb2
        except ImportError:
            pass
        else:
            return status_pb2.Status(code=code, message=reason).SerializeToString(), PROTOBUF
    return reason.encode("utf-8", "replace") + b"\n", "text/plain; charset=utf-8"


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, handler, receiver: OtlpReceiver) -> None:
        self.receiver = receiver
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Ends the kept-alive connections, so no handler outlives the receiver."""
        with self._open_lock:
            open_now = list(self._open)
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request, client_address) -> None:      # a client gone mid-answer: no traceback
        log.debug("OTLP/HTTP connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stagelens-otlp"
    sys_version = ""
    server: _HttpServer

    def setup(self) -> None:
        self.timeout = self.server.receiver.idle_timeout_s
        super().setup()

    def log_message(self, format, *args) -> None:
        log.debug("OTLP/HTTP %s " + format, self.address_string(), *args)

    def do_POST(self) -> None:
        receiver = self.server.receiver
        self._body = "pending"
        if self.path.split("?", 1)[0] != TRACES_PATH:
            self._refuse(404, f"no such path {self.path[:100]!r} (POST {TRACES_PATH})")
            return
        receiver._count("received_requests")
        content_type = self.headers.get("Content-Type", "")
        kind: str | None = None
        try:
            kind = _content_kind(content_type)
            body = self._read_body(receiver.max_body_bytes)
            answer = receiver._ingest(body, content_type, self.headers.get("Content-Encoding"))
        except RequestRejected as e:
            receiver._rejected(e)
            self._refuse(e.status, e.reason, kind)
            return
        except Exception as e:                             # never a traceback to the engine
            log.warning("OTLP/HTTP request failed: %s", e, exc_info=True)
            self._refuse(500, f"internal error: {_one_line(e)}", kind)
            return
        self._send(200, answer, kind)

    def do_GET(self) -> None:
        self._body = "pending"
        if self.path.split("?", 1)[0] == TRACES_PATH:
            self._refuse(405, f"{self.command} not allowed (POST {TRACES_PATH})", allow="POST")
        else:
            self._refuse(404, f"no such path {self.path[:100]!r} (POST {TRACES_PATH})")

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    def _refuse(self, status: int, reason: str, kind: str | None = None, allow: str | None = None) -> None:
        """Answer an error. A body not read yet is read and discarded first (up to DRAIN_BYTES, in time):
        closing on unread bytes resets the connection, and the client could lose the answer."""
        if self._body == "pending":
            self._drain()
        self._answer(status, reason, kind=kind, close=self._body != "read", allow=allow)

    def _length(self) -> int:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise RequestRejected(411, "a Content-Length is required (chunked bodies are not accepted)")
        raw = self.headers.get("Content-Length")
        if raw is None:
            if self.command == "POST":
                raise RequestRejected(411, "a Content-Length is required")
            return 0
        try:
            length = int(raw)
        except ValueError:
            raise RequestRejected(400, f"bad Content-Length {raw[:40]!r}") from None
        if length < 0:
            raise RequestRejected(400, f"bad Content-Length {raw[:40]!r}")
        return length

    def _read_body(self, limit: int) -> bytes:
        length = self._length()
        if length > limit:
            raise RequestRejected(413, f"body of {length} bytes exceeds {limit}")
        parts: list[bytes] = []
        self._receive(length, parts.append)
        return b"".join(parts)

    def _drain(self) -> None:
        try:
            length = self._length()
            if length <= DRAIN_BYTES:
                self._receive(length, lambda chunk: None)
        except (RequestRejected, OSError):
            pass

    def _receive(self, length: int, sink) -> None:
        """`length` bytes of body to `sink`, all within read_timeout_s (not per read: a slow sender is cut)."""
        receiver = self.server.receiver
        self._body = "broken"       # until all of it is read: a connection cut short is not reused
        deadline = time.monotonic() + receiver.read_timeout_s
        left = length
        try:
            while left > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                self.connection.settimeout(remaining)
                chunk = self.rfile.read1(min(left, 256 * 1024))
                if not chunk:
                    raise RequestRejected(400, f"body ended after {length - left} of {length} bytes")
                sink(chunk)
                left -= len(chunk)
            self._body = "read"
        except TimeoutError:
            raise RequestRejected(408, f"body not received within {receiver.read_timeout_s:g} s") from None
        finally:
            self.connection.settimeout(receiver.idle_timeout_s)

    def _answer(self, status: int, reason: str, kind: str | None = None, close: bool = False,
                allow: str | None = None) -> None:
        body, content_type = _error_body(status, kind, reason)
        self._send(status, body, content_type, close=close, allow=allow)

    def _send(self, status: int, body: bytes, content_type: str, close: bool = False,
              allow: str | None = None) -> None:
        if close:
            self.close_connection = True
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if allow:
                self.send_header("Allow", allow)
            if close:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            self.close_connection = True
