"""A light poll of an engine's queue gauges between scrapes, so that what lasts less than the scrape
interval (a model load of a few hundred milliseconds, the requests it defers) is still seen.

A gauge is a sample at the instant it is read: one scrape a second misses a queue that comes and
goes in between. `GaugePoller` reads `/metrics` a few times a second on a thread of its own, keeps
only the lines of the few gauge families it is told (the queue, its reasons, KV usage, whether
adapters are served), and turns them into `Gauges` with the source's own reading, so the poll and
the scrape cannot disagree on what a family means. The window's inferences
(agent.sources.inference.figures) take these samples beside the scrapes'.

A failed poll is counted and skipped: the scrape, not the poll, reports an engine that cannot be
read. A poll while the engine's reads are paused (agent.sources.scrape.heavy_answers) is counted as
such, and reads nothing.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from stagelens.sources.inference.figures import Gauges
from stagelens.sources.scrape.heavy_answers import ReadPaused
from stagelens.sources.scrape.prometheus_text import Exposition, parse_exposition

POLL_S = 0.25          # four reads a second: a load of 0.3 s is seen at least once
# samples kept: what a request's wait is charged by, as long as its span may come later
KEEP_S = 600.0


class GaugePoller:
    """Polls `fetch()` (the /metrics body) every `interval_s`, keeping `read(exposition, at)` of
    the lines of `names` only, for `keep_s`. `start()` and `stop()` may be called again safely."""

    def __init__(self, fetch: Callable[[], str], read: Callable[[Exposition, float], Gauges],
                 names: Iterable[str], interval_s: float = POLL_S, keep_s: float = KEEP_S) -> None:
        if not interval_s > 0:
            raise ValueError(f"the poll interval must be positive, got {interval_s}")
        self._fetch, self._read = fetch, read
        self._names = frozenset(names)
        self.interval_s, self.keep_s = interval_s, keep_s
        self.counts = {"polls": 0, "failed": 0, "paused": 0}
        self._samples: deque[Gauges] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> GaugePoller:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="stagelens-gauge-poll",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def samples(self, after: float, until: float) -> list[Gauges]:
        """The samples taken in (after, until], monotonic seconds, oldest first."""
        with self._lock:
            return [g for g in self._samples if after < g.at <= until]

    def kept(self) -> list[Gauges]:
        """Every sample kept, oldest first."""
        with self._lock:
            return list(self._samples)

    def poll(self) -> Gauges | None:
        """One read now; None (counted) when it failed."""
        self.counts["polls"] += 1
        try:
            text = self._fetch()
            at = time.monotonic()
            gauges = self._read(parse_exposition(self._only_named(text)), at)
        except ReadPaused:
            self.counts["paused"] += 1
            return None
        except Exception:   # noqa: BLE001  a poll never stops the poller, nor the agent: counted and skipped
            self.counts["failed"] += 1
            return None
        with self._lock:
            self._samples.append(gauges)
            while self._samples and self._samples[0].at < at - self.keep_s:
                self._samples.popleft()
        return gauges

    def _only_named(self, text: str) -> str:
        """The lines of the families polled (their samples and their # TYPE / # HELP): parsing a
        whole body of histograms four times a second would cost the node more than the poll is
        worth."""
        keep = []
        for line in text.splitlines():
            name = line.split(None, 3)[2] if line.startswith("# ") and line.count(" ") >= 2 else \
                line.split("{", 1)[0].split(" ", 1)[0]
            if name in self._names:
                keep.append(line)
        return "\n".join(keep) + "\n"

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.poll()
            next_at += self.interval_s
            delay = next_at - time.monotonic()
            if delay < 0:      # fell behind (a slow engine): skip, don't burst
                next_at, delay = time.monotonic(), 0.0
            self._stop.wait(delay)
