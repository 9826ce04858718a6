"""Host side of a node: per-core CPU busy and iowait, memory, and the engine process's threads.

Threads in uninterruptible sleep (state D) are threads blocked on I/O or a driver call: the
"threads blocked on data" signal of the cold path (docs/stages.md).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import psutil

_PROC = "/proc"


@dataclass(slots=True)
class ProcessSample:
    pid: int
    name: str | None = None
    threads: int = 0
    # state letter (R, S, D, ...) -> threads
    thread_states: dict[str, int] = field(default_factory=dict)
    threads_uninterruptible: int = 0
    uninterruptible_ratio: float | None = None
    ctx_switches_voluntary: int | None = None  # cumulative, summed over threads
    ctx_switches_involuntary: int | None = None
    error: str | None = None


@dataclass(slots=True)
class HostSample:
    cpu_count: int
    cpu_busy_percent: list[float]  # per core, since the previous sample
    cpu_iowait_percent: list[float]
    cpu_iowait_ratio: float  # whole machine
    memory_total_bytes: int
    memory_available_bytes: int
    memory_used_ratio: float
    process: ProcessSample | None = None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # a thread that exited between listing and reading
        return None


def _linux_threads(pid: int, s: ProcessSample) -> None:
    tasks = os.listdir(f"{_PROC}/{pid}/task")
    voluntary = involuntary = 0
    for tid in tasks:
        stat = _read(f"{_PROC}/{pid}/task/{tid}/stat")
        if stat is None:
            continue
        # the comm field may itself hold spaces and parentheses
        state = stat[stat.rfind(")") + 2 :][:1]
        s.thread_states[state] = s.thread_states.get(state, 0) + 1
        # /proc/<pid>/status counts only the main thread's switches: sum the threads' own.
        for line in (_read(f"{_PROC}/{pid}/task/{tid}/status") or "").splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                involuntary += int(line.split()[1])
    s.threads = sum(s.thread_states.values())
    s.ctx_switches_voluntary, s.ctx_switches_involuntary = voluntary, involuntary


def sample_process(pid: int) -> ProcessSample:
    s = ProcessSample(pid=pid)
    try:
        proc = psutil.Process(pid)
        s.name = proc.name()
        if sys.platform.startswith("linux") and os.path.isdir(f"{_PROC}/{pid}/task"):
            _linux_threads(pid, s)
        else:  # no per-thread states elsewhere: the process state stands for all its threads
            s.threads = proc.num_threads()
            s.thread_states = {proc.status()[:1].upper(): s.threads}
            switches = proc.num_ctx_switches()
            s.ctx_switches_voluntary, s.ctx_switches_involuntary = switches.voluntary, switches.involuntary
    except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
        s.error = "no such process"
        return s
    except psutil.AccessDenied:
        s.error = "access denied"
        return s
    s.threads_uninterruptible = s.thread_states.get("D", 0)
    s.uninterruptible_ratio = s.threads_uninterruptible / s.threads if s.threads else None
    return s


def _busy_and_total(t: Any) -> tuple[float, float, float]:
    """(busy, iowait, total) seconds of one cpu_times entry; guest time is already in user/nice."""
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    iowait = getattr(t, "iowait", 0.0)
    return total - t.idle - iowait, iowait, total


class HostProbe:
    """Keeps the previous CPU times so each sample covers the time since the one before."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid
        self._prev = [_busy_and_total(t) for t in psutil.cpu_times(percpu=True)]

    def sample(self) -> HostSample:
        now = [_busy_and_total(t) for t in psutil.cpu_times(percpu=True)]
        busy_pct, iowait_pct = [], []
        sum_iowait = sum_total = 0.0
        for (b1, w1, t1), (b0, w0, t0) in zip(now, self._prev, strict=False):
            dt = t1 - t0
            busy_pct.append(round(100 * (b1 - b0) / dt, 2) if dt > 0 else 0.0)
            iowait_pct.append(round(100 * (w1 - w0) / dt, 2) if dt > 0 else 0.0)
            sum_iowait += w1 - w0
            sum_total += max(dt, 0.0)
        self._prev = now
        mem = psutil.virtual_memory()
        return HostSample(
            cpu_count=len(now),
            cpu_busy_percent=busy_pct,
            cpu_iowait_percent=iowait_pct,
            cpu_iowait_ratio=sum_iowait / sum_total if sum_total > 0 else 0.0,
            memory_total_bytes=int(mem.total),
            memory_available_bytes=int(mem.available),
            memory_used_ratio=1 - mem.available / mem.total if mem.total else 0.0,
            process=None if self.pid is None else sample_process(self.pid),
        )
