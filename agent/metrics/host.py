"""Host metrics: CPU iowait, memory, the engine process's threads (uninterruptible ones are
blocked on data)."""

from __future__ import annotations

from stagelens import catalogue as c
from stagelens.metrics.families import Scrape


def collect(out: Scrape, frame, _diagnosis) -> None:
    host = frame.node_sample.host if frame and frame.node_sample is not None else None
    if host is None:
        return
    out.add(c.HOST_IOWAIT, host.cpu_iowait_ratio)
    out.add(c.HOST_CPUS, host.cpu_count)
    out.add(c.HOST_MEMORY_TOTAL, host.memory_total_bytes)
    out.add(c.HOST_MEMORY_AVAILABLE, host.memory_available_bytes)
    process = host.process
    if process is None or process.error:
        return
    out.add(c.PROCESS_THREADS, process.threads)
    out.add(c.PROCESS_THREADS_UNINTERRUPTIBLE, process.threads_uninterruptible)
    out.add(c.PROCESS_THREADS_UNINTERRUPTIBLE_RATIO, process.uninterruptible_ratio)
    for kind, count in (("voluntary", process.ctx_switches_voluntary),
                        ("involuntary", process.ctx_switches_involuntary)):
        out.add(c.PROCESS_CONTEXT_SWITCHES, count, kind=kind)
