"""Bounds on what one client can make the agent hold: the size of a request body, and the time a
connection may take to deliver its request (a slowloris trickling headers keeps a socket
forever)."""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from stagelens.engine_hooks.shared.bounded_http import (
    REQUEST_READ_TIMEOUT_S,  # the same deadline on every listener of ours
)
from stagelens.server.errors import error_body

MAX_BODY_BYTES = 1 << 20          # our bodies are prompts and small JSON; 1 MiB is generous
# after a 413, read (and drop) this much of the rest: a client still sending then reads its 413
# instead of a reset connection
DRAIN_BYTES = 16 << 20


class BodyLimit:
    """ASGI middleware: a body over `max_bytes` is refused with 413 before it is buffered. The
    body is read here, bounded, and handed to the app whole (our routes read it whole anyway)."""

    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await self._refuse(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":    # the client left before sending it all
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await self._refuse(scope, receive, send)
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, delivered = b"".join(chunks), False

        async def replay():
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()   # after the body: the disconnect, for routes that watch for it

        await self.app(scope, replay, send)

    async def _refuse(self, scope, receive, send) -> None:
        payload = json.dumps(error_body(scope["path"], 413, f"the request body is larger than {self.max_bytes} "
                                                                "bytes")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})
        drained = 0
        while drained < DRAIN_BYTES:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                return
            drained += len(message.get("body", b""))


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on reading each request: a client that has not
    delivered its headers and body `REQUEST_READ_TIMEOUT_S` after connecting (or after its
    previous response) is disconnected. Idle keep-alive connections keep uvicorn's own, shorter
    timeout."""

    read_timeout_s = REQUEST_READ_TIMEOUT_S

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_read_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_read_deadline()

    def connection_lost(self, exc) -> None:
        self._disarm_read_deadline()
        super().connection_lost(exc)

    def _arm_read_deadline(self) -> None:
        self._disarm_read_deadline()
        self._read_deadline = self.loop.call_later(self.read_timeout_s, self._read_deadline_passed)

    def _disarm_read_deadline(self) -> None:
        timer = getattr(self, "_read_deadline", None)
        if timer is not None:
            timer.cancel()
            self._read_deadline = None

    def _read_deadline_passed(self) -> None:
        self._read_deadline = None
        reading = self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and self.conn.our_state is h11.IDLE
        if reading and not self.transport.is_closing():
            self.transport.close()
