"""Host metrics: CPU iowait, memory, the engine process's threads (uninterruptible ones are blocked on data)."""

from __future__ import annotations

from agent.metrics.families import Scrape


def collect(out: Scrape, frame, _diagnosis) -> None:
    host = (frame.node_sample or {}).get("host") if frame else None
    if not host:
        return
    out.gauge("stagelens_host_cpu_iowait_ratio", "Share of CPU time in iowait since the previous sample.",
              host.get("cpu_iowait_ratio"))
    out.gauge("stagelens_host_cpus", "Logical CPUs.", host.get("cpu_count"))
    out.gauge("stagelens_host_memory_total_bytes", "Host memory in all.", host.get("memory_total_bytes"))
    out.gauge("stagelens_host_memory_available_bytes", "Host memory available.", host.get("memory_available_bytes"))
    process = host.get("process")
    if not process or process.get("error"):
        return
    out.gauge("stagelens_process_threads", "Threads of the engine process.", process.get("threads"))
    out.gauge("stagelens_process_threads_uninterruptible",
              "Engine threads in uninterruptible sleep (state D): blocked on I/O or a driver call.",
              process.get("threads_uninterruptible"))
    out.gauge("stagelens_process_threads_uninterruptible_ratio", "Share of engine threads in uninterruptible sleep.",
              process.get("uninterruptible_ratio"))
    for kind in ("voluntary", "involuntary"):
        out.counter("stagelens_process_context_switches_total", "Context switches of the engine's threads.",
                    process.get(f"ctx_switches_{kind}"), kind=kind)
