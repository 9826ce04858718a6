"""What an OTLP transport hands its request bodies to: the receiver's intake, as transports see it.

The receiver (receiver.py) composes the transports (http.py, grpc.py) and is their intake; the
transports know it only by this protocol, so neither imports the receiver and the three form no
import circle. An intake holds the bounds every transport serves under (body size, read
deadlines, connections), the budget of body bytes in flight that HTTP bodies and gRPC messages
share, and the counters a transport adds to.
"""

from __future__ import annotations

from typing import Protocol

from stagelens.engine_hooks.shared.fair_share import FairShare
from stagelens.sources.otlp.decode import RequestRejected


class SpanIntake(Protocol):
    """The receiver as a transport sees it: where a body goes, the bounds it is received under."""

    max_body_bytes: int
    max_connections: int
    read_timeout_s: float
    idle_timeout_s: float
    request_read_timeout_s: float
    # body bytes being received or decoded, by sending host; a transport gives back what it held
    bodies: FairShare

    def count(self, name: str, n: int = 1) -> None:
        """Adds `n` to the counter `name` (one of the receiver's COUNTERS)."""

    def hold_bytes(self, peer: str, n: int) -> None:
        """Holds `n` body bytes for the sending host `peer`; RequestRejected 503 when none are left
        for it."""

    def accept(self, body: bytes, content_type: str, encoding: str | None) -> bytes:
        """One body, already counted as received, decoded and kept: the answer's body
        (RequestRejected)."""

    def ingest(self, body: bytes, content_type: str, encoding: str | None = None) -> bytes:
        """One body, counted as received, decoded and kept: the answer's body (RequestRejected)."""

    def rejected(self, e: RequestRejected) -> None:
        """Counts a body refused (malformed or rejected)."""
