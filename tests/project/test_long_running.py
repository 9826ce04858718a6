"""What `serve` sets for its process (agent/long_running.py), each checked in a process of its own: both are
process-wide."""

import ctypes
import subprocess
import sys
import textwrap

import pytest

# Eight threads, each holding an allocation while the others make theirs (a new thread's first malloc takes an
# arena of its own while fewer than the limit exist), then glibc's own count of its arenas, on stderr.
ARENAS_AFTER_EIGHT_THREADS = textwrap.dedent("""
    import ctypes, sys, threading
    from stagelens.long_running import limit_malloc_arenas

    if sys.argv[1] == "limited":
        assert limit_malloc_arenas()
    held, all_started = [], threading.Barrier(8)
    def intake():
        held.append(bytearray(64 * 1024))
        all_started.wait()
    threads = [threading.Thread(target=intake) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    ctypes.CDLL("libc.so.6").malloc_stats()
""")


def _glibc() -> bool:
    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "malloc_stats")
    except OSError:
        return False


@pytest.mark.skipif(not _glibc(), reason="malloc arenas are glibc's")
def test_threads_share_two_malloc_arenas_once_limited():
    def arenas(mode: str) -> int:
        stats = subprocess.run([sys.executable, "-c", ARENAS_AFTER_EIGHT_THREADS, mode], capture_output=True,
                               text=True, timeout=60, check=True).stderr
        return sum(line.startswith("Arena ") for line in stats.splitlines())

    assert arenas("limited") == 2
    assert arenas("default") > 2      # what the limit changes: each thread would have had one


def test_objects_alive_when_serving_starts_are_left_out_of_every_collection():
    script = textwrap.dedent("""
        import gc
        from stagelens.long_running import GEN0_THRESHOLD, settle_collector

        startup = [[i] for i in range(50_000)]     # what imports and started services leave alive
        before = len(gc.get_objects())
        frozen = settle_collector()
        print(frozen >= 50_000, before - len(gc.get_objects()) >= 50_000, gc.get_threshold()[0] == GEN0_THRESHOLD)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         check=True).stdout.split()
    assert out == ["True", "True", "True"]
