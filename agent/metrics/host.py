"""Host metrics: CPU iowait, memory, the engine process's threads (uninterruptible ones are blocked on data)."""

from __future__ import annotations

from stagelens.metrics.families import Scrape


def collect(out: Scrape, frame, _diagnosis) -> None:
    host = frame.node_sample.host if frame and frame.node_sample is not None else None
    if host is None:
        return
    out.gauge("stagelens_host_cpu_iowait_ratio", "Share of CPU time in iowait since the previous sample.",
              host.cpu_iowait_ratio)
    out.gauge("stagelens_host_cpus", "Logical CPUs.", host.cpu_count)
    out.gauge("stagelens_host_memory_total_bytes", "Host memory in all.", host.memory_total_bytes)
    out.gauge("stagelens_host_memory_available_bytes", "Host memory available.", host.memory_available_bytes)
    process = host.process
    if process is None or process.error:
        return
    out.gauge("stagelens_process_threads", "Threads of the engine process.", process.threads)
    out.gauge("stagelens_process_threads_uninterruptible",
              "Engine threads in uninterruptible sleep (state D): blocked on I/O or a driver call.",
              process.threads_uninterruptible)
    out.gauge("stagelens_process_threads_uninterruptible_ratio", "Share of engine threads in uninterruptible sleep.",
              process.uninterruptible_ratio)
    for kind, count in (("voluntary", process.ctx_switches_voluntary),
                        ("involuntary", process.ctx_switches_involuntary)):
        out.counter("stagelens_process_context_switches_total", "Context switches of the engine's threads.",
                    count, kind=kind)
