"""`--otlp-forward`: every accepted OTLP body sent on, unchanged, to the site's collector
(OTLP/HTTP).

From one background thread, through a queue bounded in bodies and in bytes (`max_queued`,
`max_queued_bytes`): a slow, hung or dead upstream never delays the answer to the engine and never
makes the agent hold more than the bound (256 bodies of 4 MiB were ~1 GiB before the bytes were
bounded). A body that does not fit is dropped and counted (`forward_dropped`), never waited for.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable

from stagelens.http_client import EXCHANGE_ERRORS, request

log = logging.getLogger(__name__)

ANSWER_BYTES = 1024 * 1024            # an upstream's answer past this counts as a failed forward
MAX_QUEUED = 256
# four full-size bodies waiting: what a hung upstream can make us hold
MAX_QUEUED_BYTES = 16 * 1024 * 1024


class Forwarder:
    """Sends bodies to `url` in the order accepted; `count(name)` is told `forwarded`,
    `forward_failed`, `forward_dropped`."""

    def __init__(self, url: str, count: Callable[[str], None], *, max_queued: int = MAX_QUEUED,
                 max_queued_bytes: int = MAX_QUEUED_BYTES, timeout_s: float = 5.0) -> None:
        if max_queued < 1 or max_queued_bytes < 1:
            raise ValueError("max_queued and max_queued_bytes must be at least 1")
        self.url = url
        self.parts = forward_parts(url)
        self.timeout_s = timeout_s
        self.max_queued = max_queued
        self.max_queued_bytes = max_queued_bytes
        self._count = count
        self._queue: collections.deque[tuple[bytes, str, str | None]] = collections.deque()
        self._queued_bytes = 0
        self._ready = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def queued_bytes(self) -> int:
        with self._ready:
            return self._queued_bytes

    def start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="otlp-forward", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._ready:
            self._stopping = True
            self._queue.clear()
            self._queued_bytes = 0
            self._ready.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)
            self._thread = None

    def put(self, body: bytes, content_type: str, encoding: str | None) -> None:
        with self._ready:
            fits = (len(self._queue) < self.max_queued
                    and self._queued_bytes + len(body) <= self.max_queued_bytes)
            if fits:
                self._queue.append((body, content_type, encoding))
                self._queued_bytes += len(body)
                self._ready.notify()
        if not fits:
            self._count("forward_dropped")

    def _next(self) -> tuple[bytes, str, str | None] | None:
        with self._ready:
            while not self._queue and not self._stopping:
                self._ready.wait()
            if self._stopping:
                return None
            item = self._queue.popleft()
            self._queued_bytes -= len(item[0])
            return item

    def _loop(self) -> None:
        while (item := self._next()) is not None:
            self._send(*item)

    def _send(self, body: bytes, content_type: str, encoding: str | None) -> None:
        headers = {"Content-Type": content_type}
        if encoding:
            headers["Content-Encoding"] = encoding
        parts = self.parts
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        # one deadline for the whole exchange, name lookup included
        deadline = time.monotonic() + self.timeout_s
        try:
            status, reason, _ = request("POST", parts, target, headers, deadline, ANSWER_BYTES, body)
        except EXCHANGE_ERRORS as e:
            self._count("forward_failed")
            log.debug("forwarding to %s failed: %s", self.url, str(e) or type(e).__name__)
            return
        if 200 <= status < 300:
            self._count("forwarded")
        else:
            self._count("forward_failed")
            log.debug("forwarding to %s failed: HTTP %s %s", self.url, status, reason)


def forward_parts(url: str) -> urllib.parse.SplitResult:
    """An OTLP/HTTP URL split; ValueError for one that is not (no http(s) scheme, no host, a bad
    port)."""
    parts: urllib.parse.SplitResult | None
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port    # noqa: B018  (reading it checks it)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"forward_to must be an OTLP/HTTP URL, not {url!r}")
    return parts
