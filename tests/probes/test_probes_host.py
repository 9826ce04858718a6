"""The host probe against our own process."""

from __future__ import annotations

import os
import threading
import time

import psutil

from stagelens.probes.host import HostProbe, sample_process


def test_our_own_process_threads_and_context_switches():
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)  # a second thread, asleep
    worker.start()
    try:
        before = sample_process(os.getpid())
        for _ in range(20):
            time.sleep(0.001)  # each sleep gives up the CPU: voluntary context switches
        after = sample_process(os.getpid())
    finally:
        stop.set()
        worker.join()
    assert before.error is None and before.name
    assert before.threads >= 2 and sum(before.thread_states.values()) == before.threads
    assert after.ctx_switches_voluntary > before.ctx_switches_voluntary
    assert after.ctx_switches_involuntary >= before.ctx_switches_involuntary
    assert 0 <= after.threads_uninterruptible <= after.threads
    assert after.uninterruptible_ratio == after.threads_uninterruptible / after.threads


def test_a_process_that_is_gone():
    pid = max(psutil.pids()) + 10_000
    while psutil.pid_exists(pid):
        pid += 1
    s = sample_process(pid)
    assert s.error == "no such process" and s.threads == 0


def test_host_sample_per_core_cpu_and_memory():
    probe = HostProbe(pid=os.getpid())
    sum(i * i for i in range(200_000))  # some CPU time between the two readings
    s = probe.sample()
    assert s.cpu_count == psutil.cpu_count() == len(s.cpu_busy_percent) == len(s.cpu_iowait_percent)
    assert all(0 <= p <= 100 for p in s.cpu_busy_percent + s.cpu_iowait_percent)
    assert 0 <= s.cpu_iowait_ratio <= 1
    assert 0 < s.memory_available_bytes <= s.memory_total_bytes and 0 <= s.memory_used_ratio <= 1
    assert s.process is not None and s.process.pid == os.getpid() and s.process.threads >= 1
    assert HostProbe().sample().process is None
