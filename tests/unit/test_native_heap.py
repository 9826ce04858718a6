"""The C heap's trim gives back what a thread's arena holds after a body was parsed and freed."""

import subprocess
import sys
import textwrap

import pytest

from agent.native_heap import NativeHeap

# A thread reads 64 MiB in 96 KiB pieces (under malloc's mmap threshold: they land in that thread's arena), a
# small object kept alive after each one (what the intake keeps: a span, a counter), then frees the pieces.
FRAGMENTED_ARENA = textwrap.dedent("""
    import os, threading
    from agent.native_heap import NativeHeap

    def rss_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    kept = []
    def intake():
        pieces = []
        for i in range(int(64 * 1024 / 96)):
            pieces.append(bytearray(96 * 1024))
            kept.append(str(i) * 8)
        del pieces
    worker = threading.Thread(target=intake)
    worker.start()
    worker.join()
    before = rss_mib()
    heap = NativeHeap()
    print(heap.managed, heap.trim(), round(before - rss_mib(), 1))
""")


def test_a_trim_gives_back_a_threads_freed_arena():
    if not NativeHeap().managed:
        pytest.skip("not glibc: nothing to trim")
    out = subprocess.run([sys.executable, "-c", FRAGMENTED_ARENA], capture_output=True, text=True, timeout=60,
                         check=True).stdout.split()
    managed, released, given_back_mib = out[0], out[1], float(out[2])
    assert (managed, released) == ("True", "True")
    assert given_back_mib > 32, f"only {given_back_mib} MiB of the 64 MiB freed came back"


def test_the_sampler_listener_trims_once_per_period():
    heap = NativeHeap(trim_every_s=3600.0)
    for _ in range(5):
        heap.on_frame(None, [])
    assert heap.trims == 0
    heap.trim_every_s = 0.0
    heap.on_frame(None, [])
    heap.on_frame(None, [])
    assert heap.trims == (2 if heap.managed else 0)
