"""Busy co-runners: one process spinning on each core while a measurement runs, as a noisy host's
neighbours would (`bench/accuracy.py --stress`). Started and stopped by the bench itself, so none outlives it."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager

# spins until its parent is gone: a bench killed before its `finally` leaves no co-runner behind
SPIN = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"


@contextmanager
def busy_cores(count: int | None = None):
    """Run the block with `count` (default: one per core) spinning processes beside it."""
    n = count if count is not None else os.cpu_count() or 1
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield len(procs)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
