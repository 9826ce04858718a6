"""The outside soak's hostile readers of `/api/v1/frames` (issue 39, item 2) and its CPU figures.

Every few seconds one of: ten clients at once each reading the whole history (`limit=100000`, the documented
most), a client that asks for it and reads 64 KiB then nothing for 20 s, one that leaves after 100 KB. The
read routes ask no token, so any client on the network can do this to the agent.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import random
import re
import threading
from collections import Counter
from pathlib import Path

import psutil

from stagelens.server.api import MAX_FRAMES_LIMIT
from tests.helpers.raw_get import get_dropping

FRAMES_HOSTILE = ("ten_whole_histories", "slow_reader", "leave_midway")
EVERY_S = 4.0
DAEMONSET = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes" / "daemonset.yaml"


class FramesClients:
    def __init__(self, port: int, seed: int, stop: threading.Event) -> None:
        self.port, self.rng, self.stop = port, random.Random(seed + 3), stop
        self.sent, self.answers = Counter(), Counter()
        self.pool = concurrent.futures.ThreadPoolExecutor(12)

    def _get(self, read_at_most: int | None = None, then_wait_s: float = 0.0) -> None:
        """GET the whole history; its body read and dropped (up to `read_at_most` bytes, then held
        `then_wait_s` and left). The status is counted."""
        with contextlib.suppress(OSError):
            head, _ = get_dropping(self.port, f"/api/v1/frames?limit={MAX_FRAMES_LIMIT}", read_at_most, 8192,
                                   lambda: self.stop.wait(then_wait_s))
            self.answers[head.split(b" ", 2)[1].decode("latin-1") if head.count(b" ") >= 2 else "none"] += 1

    def hostile_one(self, kind: str) -> None:
        self.sent[kind] += 1
        if kind == "ten_whole_histories":
            for _ in range(10):
                self.pool.submit(self._get)
        elif kind == "slow_reader":
            self.pool.submit(self._get, 64 * 1024, 20.0)
        elif kind == "leave_midway":
            self.pool.submit(self._get, 100_000)

    def run(self) -> None:
        while not self.stop.wait(EVERY_S):
            self.hostile_one(self.rng.choice(FRAMES_HOSTILE))


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (user + system, all its threads)."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def daemonset_cpu_millicores() -> dict[str, int]:
    """The DaemonSet's CPU request and limit (resources.requests.cpu / limits.cpu, in m), as deploy/ says now."""
    text = DAEMONSET.read_text()
    found = {}
    for part in ("requests", "limits"):
        match = re.search(part + r":\s*\n(?:\s+\w+: .*\n)*?\s+cpu: (\d+)m", text)
        if match is None:
            raise SystemExit(f"{DAEMONSET}: no resources.{part}.cpu in m")
        found[part] = int(match.group(1))
    return found


def cpu_figures(samples: list[tuple[float, float]], window_s: float = 10.0) -> dict:
    """The agent's CPU in millicores over windows of `window_s` (from (seconds, CPU seconds) samples): the
    highest window, the 95th percentile, the mean, and the windows past the DaemonSet's request and limit."""
    if len(samples) < 2:
        return {}
    windows, start = [], samples[0]
    for t, cpu in samples[1:]:
        if t - start[0] >= window_s:
            windows.append(1000 * (cpu - start[1]) / (t - start[0]))
            start = (t, cpu)
    if not windows:
        return {}
    cpu = daemonset_cpu_millicores()
    ordered = sorted(windows)
    mean = 1000 * (samples[-1][1] - samples[0][1]) / (samples[-1][0] - samples[0][0])
    return {"cpu_window_s": window_s, "cpu_max_millicores": round(ordered[-1]),
            "cpu_p95_millicores": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]),
            "cpu_mean_millicores": round(mean), "cpu_request_millicores": cpu["requests"],
            "cpu_limit_millicores": cpu["limits"],
            "cpu_windows_over_request": f"{sum(w > cpu['requests'] for w in windows)} of {len(windows)}",
            "cpu_windows_over_limit": f"{sum(w > cpu['limits'] for w in windows)} of {len(windows)}",
            "cpu_by_window_millicores": " ".join(f"{w:.0f}" for w in windows)}
