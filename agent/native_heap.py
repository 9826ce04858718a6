"""The C heap under a long-running agent: glibc's malloc keeps what Python frees.

Every thread that allocates may get an arena of its own (up to 8 a core), and an arena gives memory back to the
system only from its top. The agent's intake threads each read a request body of up to a few MiB, parse it and
free it; the freed space stays in that thread's arena, scattered among small objects still alive. Measured by
`python bench/soak.py --outside` (figures in deploy/kubernetes/daemonset.yaml): RSS climbed ~5 MiB a minute for
18 minutes while Python's own objects grew by a few MiB, to 0.97 of the DaemonSet's limit. Two arenas and a trim
of every arena's free pages every few seconds hold it level.

Only glibc has these calls; elsewhere (musl, macOS) both are no-ops that say so.
"""

from __future__ import annotations

import ctypes
import logging
import time

log = logging.getLogger(__name__)

M_ARENA_MAX = -8          # mallopt's parameter number in glibc's malloc.h
ARENAS = 2                # one for the sampler and the server's loop, one shared by the intake threads
TRIM_EVERY_S = 10.0       # a trim walks every arena: ~1 ms for the agent's heap, once in this many seconds


def _glibc():
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


class NativeHeap:
    def __init__(self, trim_every_s: float = TRIM_EVERY_S) -> None:
        self._libc = _glibc()
        self.trim_every_s = trim_every_s
        self.trims = 0
        self._last_trim = time.monotonic()

    @property
    def managed(self) -> bool:
        return self._libc is not None

    def limit_arenas(self, arenas: int = ARENAS) -> bool:
        """Fewer arenas for the threads started from now on (the intake's): True when glibc took it."""
        if self._libc is None:
            log.debug("not glibc: the C heap's arenas are left as they are")
            return False
        return bool(self._libc.mallopt(M_ARENA_MAX, arenas))

    def trim(self) -> bool:
        """Give every arena's free pages back to the system now; True when some were."""
        if self._libc is None:
            return False
        self.trims += 1
        self._last_trim = time.monotonic()
        return bool(self._libc.malloc_trim(0))

    def on_frame(self, _frame, _timelines) -> None:
        """A sampler listener: a trim once every `trim_every_s`, on the sampler's thread."""
        if time.monotonic() - self._last_trim >= self.trim_every_s:
            self.trim()
