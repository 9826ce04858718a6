"""An intake budget shared fairly between sending hosts: one host may hold at most `SHARE` of it, so
the rest always serves the others (a hostile sender holding the whole byte budget or every call slot
made a well-behaved engine's batches run out of their retries).

A host is the peer's IPv4 address, or its IPv6 /64 (one machine commonly holds a whole /64, so per
address would be no bound at all). `take` never waits: the caller refuses with a retryable answer.
"""

from __future__ import annotations

import ipaddress
import threading
import urllib.parse

SHARE = 0.75
BUSY = "busy"                # the budget is spent, by all hosts together
BUSY_PEER = "busy_peer"      # this host already holds its share


def peer_key(host: str) -> str:
    """The sending host an address belongs to: the IPv4 address, or the IPv6 /64
    (`2001:db8::/64`)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0].strip("[]"))
    except ValueError:
        return host                              # not an IP address (a unix socket's path): itself
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:      # a dual-stack listener's IPv4 client
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def grpc_peer_key(peer: str) -> str:
    """`peer_key` of gRPC's `context.peer()`: `ipv4:1.2.3.4:567`, `ipv6:[::1]:567` (or
    %-escaped)."""
    scheme, _, rest = urllib.parse.unquote(peer).partition(":")
    if scheme == "ipv4":
        return peer_key(rest.rpartition(":")[0])
    if scheme == "ipv6":
        return peer_key(rest.rpartition("]")[0].lstrip("["))
    return peer


class FairShare:
    """`limit` units (bytes, connections, calls) held at once by all hosts together, at most
    `per_peer` of them by one host."""

    def __init__(self, limit: int, share: float = SHARE) -> None:
        if limit < 1:
            raise ValueError("a fair share's limit must be at least 1")
        self.limit = limit
        self.per_peer = max(1, int(limit * share))
        self.held = 0
        self._by_peer: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, peer: str, n: int = 1) -> str | None:
        """Holds `n` units for `peer`: None when taken, else why not (BUSY_PEER, BUSY)."""
        with self._lock:
            mine = self._by_peer.get(peer, 0)
            if mine + n > self.per_peer:
                return BUSY_PEER
            if self.held + n > self.limit:
                return BUSY
            self._by_peer[peer] = mine + n
            self.held += n
            return None

    def give(self, peer: str, n: int = 1) -> None:
        with self._lock:
            left = self._by_peer.get(peer, 0) - n
            if left > 0:
                self._by_peer[peer] = left
            # a host gone holds no entry: the dict stays as small as the senders
            else:
                self._by_peer.pop(peer, None)
            self.held -= n

    def held_by(self, peer: str) -> int:
        with self._lock:
            return self._by_peer.get(peer, 0)
