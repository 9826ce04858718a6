"""What `serve` sets for its process, which runs for weeks beside receivers that take hostile
bodies.

Measured with `python bench/soak.py --outside` (figures in deploy/kubernetes/daemonset.yaml):

- **The GIL.** The intake threads (OTLP decoding, exposition parsing) are pure Python and hold the
  GIL for the
  whole of the default 5 ms switch interval: a scrape arriving meanwhile waited that long, once or
  more, for the event loop to run (/metrics p99 13.9 ms). 1 ms hands the loop the GIL sooner. Only
  where those threads run: a hosted lab engine's step loop keeps the default.
- **The C heap.** Each thread that allocates may get a malloc arena of its own (glibc: up to 8 a
  core), and an
  arena gives memory back to the system only from its top. The intake threads each read bodies of up
  to a few MiB, parse and free them; what they freed stayed in their arenas among small objects
  still alive. Two arenas took 40 MiB off the RSS five minutes into the soak.
- **The cyclic collector.** A full collection walks every tracked object: the imported modules, then
  the frame
  history and the spans' timelines. It took 55-100 ms, once every 30 s, all that time holding the
  GIL, so the scrape that came meanwhile waited for it: the soak's /metrics p99 was 17 ms. The
  objects alive once serving has started (most of them imports) are frozen out of every collection,
  and a collection starts after GEN0_THRESHOLD allocations instead of 700, which makes full ones
  rarer in proportion.
"""

from __future__ import annotations

import ctypes
import gc
import sys

SWITCH_INTERVAL_S = 0.001  # the longest a thread holds the GIL while another waits for it
M_ARENA_MAX = -8           # mallopt's parameter number in glibc's malloc.h
# one for the event loop and the sampler, one shared by the intake threads
MALLOC_ARENAS = 2
GEN0_THRESHOLD = 10_000    # allocations (net of frees) between two youngest-generation collections


def hand_over_the_gil_sooner(interval_s: float = SWITCH_INTERVAL_S) -> None:
    sys.setswitchinterval(interval_s)


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """At most `arenas` malloc arenas for the threads started from now on; True when the C
    library took it (glibc's mallopt; elsewhere, musl or macOS, nothing is changed)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    return bool(mallopt(M_ARENA_MAX, arenas)) if mallopt is not None else False


def settle_collector(gen0_threshold: int = GEN0_THRESHOLD) -> int:
    """Freeze the objects alive now out of every later collection and space collections out; the
    number of objects frozen."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)
    return gc.get_freeze_count()
