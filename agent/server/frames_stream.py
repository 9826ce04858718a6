"""`/api/v1/frames` streamed: the answer is encoded a chunk at a time while it is sent, so what one
request holds does not grow with the history (the whole list built in memory took the agent from 232
to 335 MB for 900 frames of an 8-GPU node, ten requests in parallel to 732 MB). A slow reader is
held back by the socket's flow control, not buffered for. Reads of more than HEAVY_FRAMES frames
(what the TUI asks for) are heavy: at most MAX_HEAVY_READS stream at once; another is answered 503
with Retry-After at once, never queued; and together they are sent at most HEAVY_BYTES_PER_S, so
what encoding them costs the agent (~80 MB of JSON a CPU second) stays bounded however often a
client asks: a client looping over whole histories held a core.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

from fastapi import HTTPException
from fastapi.responses import StreamingResponse

# frames are sent in chunks of about this much (one frame of 50 KB may pass it)
CHUNK_BYTES = 64 * 1024
# each costs the agent a core for a second or two on a full 8-GPU history
MAX_HEAVY_READS = 2
HEAVY_BYTES_PER_S = 4 << 20  # ~5% of a core; 900 frames of an 8-GPU node (46 MB) in about 11 s


class HeavyReads:
    """How many heavy reads stream now, at most `most`, and how many were refused; `pace(n)`
    waits until `n` more bytes of them fit in `bytes_per_s` (all heavy reads together). `clock`
    and `sleep` are time's."""

    def __init__(self, most: int = MAX_HEAVY_READS, bytes_per_s: float = HEAVY_BYTES_PER_S,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.most, self.now = most, 0
        self.refused = 0
        self.bytes_per_s, self._clock, self._sleep = bytes_per_s, clock, sleep
        # when the bytes paced so far will have been sent at the rate
        self._free_at = float("-inf")
        self._lock = threading.Lock()

    def pace(self, size: int) -> None:
        """Wait until `size` more bytes are within the rate (each caller its turn: the waits add
        up)."""
        with self._lock:
            now = self._clock()
            start = max(now, self._free_at)
            self._free_at = start + size / self.bytes_per_s
        if start > now:
            self._sleep(start - now)

    def enter(self) -> None:
        """Take a place, or HTTPException 503 when every place is taken (counted)."""
        with self._lock:
            if self.now >= self.most:
                self.refused += 1
                raise HTTPException(503, f"{self.now} long reads of frames are in progress (at most {self.most} "
                                         "at once): retry in a second, or ask fewer with `limit`",
                                    headers={"Retry-After": "1"})
            self.now += 1

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


def frames_chunks(frames: list, pace: Callable[[int], None] | None = None) -> Iterator[bytes]:
    """The JSON array of `frames` (each its `to_dict()`), in chunks of about CHUNK_BYTES: a frame
    is encoded only when the chunk before it has been taken, and `pace(size)` has let the chunk
    go."""
    chunk, first = [b"["], True
    size = 1
    for frame in frames:
        text = (b"" if first else b",") + json.dumps(frame.to_dict(), ensure_ascii=False, allow_nan=False,
                                                    separators=(",", ":")).encode()
        first = False
        chunk.append(text)
        size += len(text)
        if size >= CHUNK_BYTES:
            if pace is not None:
                pace(size)
            yield b"".join(chunk)
            chunk, size = [], 0
    chunk.append(b"]")
    yield b"".join(chunk)


class FramesResponse(StreamingResponse):
    """The streamed array; a heavy read's place is given back however the response ends (sent, or
    the client gone)."""

    def __init__(self, frames: list, heavy: HeavyReads | None) -> None:
        super().__init__(frames_chunks(frames, heavy.pace if heavy is not None else None),
                         media_type="application/json")
        self._heavy = heavy

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self._heavy is not None:
                self._heavy.leave()
