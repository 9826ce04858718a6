"""A thread-per-connection HTTP server with the bounds of the agent's main server
(agent/server/limits.py): what one client, or a thousand slow ones, can make a small `http.server`
listener hold.

- At most `max_connections` are handled at once, and at most 3/4 of them from one sending host
  (engine_hooks/shared/fair_share.py): one more is answered 503 and closed at once, without a thread
  (a thread each made 1,725 slow connections hold 1,743 threads).
- A request's line and headers must arrive within `REQUEST_READ_TIMEOUT_S` of the connection or of
  the
  previous answer, in all (not per read: a client dripping a byte a second would otherwise hold its
  thread for ever); then the connection is closed.
- A client that leaves before reading its answer (a broken pipe, a reset) is counted in
  `clients_gone`,
  never a traceback on stderr; any other failure of a handler is one log line.

Used by the vLLM face's `/metrics` listener and the agent's OTLP/HTTP receiver.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from stagelens.engine_hooks.shared.fair_share import BUSY_PEER, FairShare, peer_key

log = logging.getLogger(__name__)

# from connection (or the previous answer) to the request's headers read
REQUEST_READ_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64              # handled at once, a thread each
_BUSY_BODY = b"too many connections; try again\n"
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; "
         b"charset=utf-8\r\nContent-Length: %d\r\nConnection: "
         b"close\r\nRetry-After: 1\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class BoundedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, handler, *, max_connections: int = MAX_CONNECTIONS,
                 request_read_timeout_s: float = REQUEST_READ_TIMEOUT_S) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.max_connections = max_connections
        self.request_read_timeout_s = request_read_timeout_s
        self.clients_gone = 0          # left before their answer was written
        # answered 503: max_connections were open, or the host's share of them
        self.refused_busy = 0
        self._connections = FairShare(max_connections)
        self._open: dict[socket.socket, str] = {}     # connection -> its sending host
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request, client_address) -> None:
        peer = peer_key(client_address[0]) if isinstance(client_address, tuple) else ""
        with self._open_lock:
            busy = self._connections.take(peer)
            if busy is None:
                self._open[request] = peer
            else:
                self.refused_busy += 1
        if busy is not None:
            if busy == BUSY_PEER:
                self.on_busy_peer()
            with contextlib.suppress(OSError):
                request.setblocking(False)       # the accepting thread never waits on a client
                request.send(_BUSY)
            self.close_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:                    # no thread started: the slot is not held
            self.shutdown_request(request)
            raise

    def on_busy_peer(self) -> None:
        """A connection refused because its host holds its share: for a subclass to count."""

    def shutdown_request(self, request) -> None:
        with self._open_lock:
            peer = self._open.pop(request, None)
            if peer is not None:
                self._connections.give(peer)
        super().shutdown_request(request)

    @property
    def open_connections(self) -> int:
        with self._open_lock:
            return len(self._open)

    def close_connections(self) -> None:
        """Ends the kept-alive connections, so no handler outlives the server."""
        with self._open_lock:
            open_now = list(self._open)
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request, client_address) -> None:
        # called inside the handler's `except`: what failed is the exception being handled
        error = sys.exc_info()[1]
        # BrokenPipe, ConnectionReset, a timeout: the client's doing
        if isinstance(error, OSError):
            with self._open_lock:
                self.clients_gone += 1
            return
        log.warning("HTTP handler for %s failed: %s: %s",
                    client_address[0] if client_address else "?", type(error).__name__,
                    " ".join(str(error).split())[:200])


class _DeadlineReader(io.RawIOBase):
    """The socket's bytes, with an overall deadline while one is set: each read waits only what
    is left."""

    def __init__(self, sock: socket.socket, idle_timeout_s: float | None) -> None:
        self.sock = sock
        self.idle_timeout_s = idle_timeout_s
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request was not received in time")
            self.sock.settimeout(left if self.idle_timeout_s is None else min(left, self.idle_timeout_s))
        return self.sock.recv_into(buffer)


class BoundedHandler(BaseHTTPRequestHandler):
    """A request handler whose request line and headers are read under the server's deadline. A
    subclass setting a socket timeout of its own (for a body) restores `self.timeout` after."""

    server: BoundedHTTPServer
    timeout = REQUEST_READ_TIMEOUT_S       # per read; the deadline below bounds the whole

    def setup(self) -> None:
        super().setup()
        self._reader = _DeadlineReader(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self._reader.deadline = time.monotonic() + self.server.request_read_timeout_s
        super().handle_one_request()

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self._reader.deadline = None               # headers read: a body is the handler's to bound
        self.connection.settimeout(self.timeout)
        return parsed
