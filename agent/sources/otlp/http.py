"""OTLP/HTTP `POST /v1/traces` for the OtlpReceiver (receiver.py), on a thread-per-connection server
with the agent's bounds (engine_hooks/shared/bounded_http.py: connections, the headers' deadline,
clients gone counted). Each body goes to the receiver as its intake (intake.py), which this module
does not import.

A body is read only within the receiver's budget of body bytes in flight (`max_inflight_bytes`, all
connections and gRPC calls together, at most 3/4 of it for one sending host): past it the request is
answered 503 with Retry-After, which OTLP exporters retry, before the body is read, so eight senders
of 4 MiB cannot make the agent hold 2.9 GB, nor one host keep the others out.
"""

from __future__ import annotations

import json
import logging
import time

from stagelens.engine_hooks.shared.bounded_http import BoundedHandler, BoundedHTTPServer
from stagelens.engine_hooks.shared.fair_share import peer_key
from stagelens.sources.otlp.decode import JSON, PROTOBUF, RequestRejected, content_kind, one_line
from stagelens.sources.otlp.intake import SpanIntake

log = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
# a refused body up to this size is read and discarded before the answer
DRAIN_BYTES = 16 * 1024 * 1024
RETRY_AFTER_S = 1

# google.rpc.Code of an HTTP answer's Status body: INVALID_ARGUMENT, DEADLINE_EXCEEDED,
# RESOURCE_EXHAUSTED, UNAVAILABLE
_RPC_CODE = {400: 3, 408: 4, 411: 3, 413: 8, 415: 3, 503: 14}


class HttpIntake(BoundedHTTPServer):
    def __init__(self, address, intake: SpanIntake) -> None:
        self.intake = intake
        super().__init__(address, _Handler, max_connections=intake.max_connections,
                         request_read_timeout_s=intake.request_read_timeout_s)

    def on_busy_peer(self) -> None:
        self.intake.count("busy_peer")


def error_body(status: int, kind: str | None, reason: str) -> tuple[bytes, str]:
    """A google.rpc.Status in the request's encoding (as the OTLP spec asks), else one line of
    text."""
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


class _Handler(BoundedHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stagelens-otlp"
    sys_version = ""
    server: HttpIntake

    def setup(self) -> None:
        # socketserver reads the timeout off the instance; typeshed declares it a ClassVar
        self.timeout = self.server.intake.idle_timeout_s   # type: ignore[misc]
        super().setup()

    def log_message(self, format, *args) -> None:
        log.debug("OTLP/HTTP %s " + format, self.address_string(), *args)

    def do_POST(self) -> None:
        intake = self.server.intake
        self._body = "pending"
        if self.path.split("?", 1)[0] != TRACES_PATH:
            self._refuse(404, f"no such path {self.path[:100]!r} (POST {TRACES_PATH})")
            return
        intake.count("received_requests")
        content_type = self.headers.get("Content-Type", "")
        kind: str | None = None
        held, body, peer = 0, None, peer_key(self.client_address[0])
        answer, refusal = b"", None
        try:
            kind = content_kind(content_type)
            length = self._length()
            if length > intake.max_body_bytes:
                raise RequestRejected(
                    413, f"body of {length} bytes exceeds {intake.max_body_bytes}")
            intake.hold_bytes(peer, length)
            held = length
            body = self._read_body(length)
            answer = intake.accept(body, content_type, self.headers.get("Content-Encoding"))
        except RequestRejected as e:
            intake.rejected(e)
            refusal = e.status, e.reason
        except Exception as e:                             # never a traceback to the engine
            log.warning("OTLP/HTTP request failed: %s: %s", type(e).__name__, one_line(e))
            refusal = 500, f"internal error: {one_line(e)}"
        finally:
            # given back before the answer: a sender's next body, sent once it has this answer, must
            # find the bytes free
            body = None
            intake.bodies.give(peer, held)
        if refusal is not None:
            self._refuse(*refusal, kind)
        else:
            assert kind is not None   # no refusal: content_kind answered
            self._send(200, answer, kind)

    def do_GET(self) -> None:
        self._body = "pending"
        if self.path.split("?", 1)[0] == TRACES_PATH:
            self._refuse(405, f"{self.command} not allowed (POST {TRACES_PATH})", allow="POST")
        else:
            self._refuse(404, f"no such path {self.path[:100]!r} (POST {TRACES_PATH})")

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    def _refuse(self, status: int, reason: str, kind: str | None = None, allow: str | None = None) -> None:
        """Answer an error. A body not read yet is read and discarded first (up to DRAIN_BYTES,
        in time): closing on unread bytes resets the connection, and the client could lose the
        answer."""
        if self._body == "pending":
            self._drain()
        body, content_type = error_body(status, kind, reason)
        retry = str(RETRY_AFTER_S) if status == 503 else None
        self._send(status, body, content_type, close=self._body != "read", allow=allow,
                   retry_after=retry)

    def _length(self) -> int:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise RequestRejected(411,
                                  "a Content-Length is required (chunked bodies are not accepted)")
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

    def _read_body(self, length: int) -> bytearray:
        """The body read into one buffer of its declared size (not chunks joined: that held it
        twice)."""
        body = bytearray(length)
        view = memoryview(body)
        self._receive(length, lambda left: self.rfile.readinto1(view[length - left:]))
        return body

    def _drain(self) -> None:
        try:
            length = self._length()
            if length <= DRAIN_BYTES:
                scratch = memoryview(bytearray(min(length, 256 * 1024)))
                self._receive(length, lambda left: self.rfile.readinto1(scratch[:left]))
        except (RequestRejected, OSError):
            pass

    def _receive(self, length: int, read_into) -> None:
        """`length` bytes of body, each read by `read_into(bytes left)` (the count it read), all
        within read_timeout_s (not per read: a slow sender is cut)."""
        intake = self.server.intake
        self._body = "broken"       # until all of it is read: a connection cut short is not reused
        deadline = time.monotonic() + intake.read_timeout_s
        left = length
        try:
            while left > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                self.connection.settimeout(remaining)
                got = read_into(left)
                if not got:
                    raise RequestRejected(400, f"body ended after {length - left} of {length} bytes")
                left -= got
            self._body = "read"
        except TimeoutError:
            raise RequestRejected(
                408, f"body not received within {intake.read_timeout_s:g} s") from None
        finally:
            self.connection.settimeout(intake.idle_timeout_s)

    def _send(self, status: int, body: bytes, content_type: str, close: bool = False,
              allow: str | None = None, retry_after: str | None = None) -> None:
        if close:
            self.close_connection = True
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if allow:
                self.send_header("Allow", allow)
            if retry_after:
                self.send_header("Retry-After", retry_after)
            if close:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            self.close_connection = True
