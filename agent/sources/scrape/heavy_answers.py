"""Backing off an engine whose /metrics costs the agent too much to read.

A body under the caps but near them (7.8 MB, 19,400 series) spent the scrape's whole parse budget
every second, and the gauge poll fetched it four times a second: `serve --engine vllm` sat at ~0.8
core (the DaemonSet's limit is 500m). After a heavy answer (over a cap, near one, or a parse that
broke or neared its deadline) the engine is not read for a pause, scrape and poll alike; each heavy
answer doubles the pause, up to MAX_PAUSE_S, and a calm of twice that starts the doubling over. So
an engine that is always heavy costs one read every MAX_PAUSE_S, whatever it sends. Each pause is
counted and said (one log line a pause).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from stagelens.catalogue import ENGINE_INTAKE
from stagelens.errors import CollectError
from stagelens.printable import printable

log = logging.getLogger(__name__)

FIRST_PAUSE_S = 2.0
MAX_PAUSE_S = 120.0
# a body past half of a cap (bytes, series, the parse's CPU time) is near it
NEAR_SHARE = 0.5


class ReadPaused(CollectError):
    """The engine is not read now: its last answer was too heavy
    (agent.sources.scrape.heavy_answers)."""


class HeavyAnswers:
    """The pause after heavy answers of the engine at `url`. `heavy(why)` starts (or doubles) it;
    `check()` raises ReadPaused while it lasts. Thread-safe: the scrape and the gauge poll share
    one."""

    def __init__(self, url: str, first_s: float = FIRST_PAUSE_S, most_s: float = MAX_PAUSE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url, self.first_s, self.most_s, self._clock = url, first_s, most_s, clock
        self.counts = {"heavy_answers": 0, "reads_skipped": 0}
        self._pause_s = 0.0
        self._until = self._last = float("-inf")
        self._why = ""
        self._lock = threading.Lock()

    def check(self) -> None:
        """ReadPaused (counted as a read skipped) while a pause lasts; nothing otherwise."""
        with self._lock:
            if self._clock() < self._until:
                self.counts["reads_skipped"] += 1
                raise ReadPaused(f"{self.url}: not read for {self._pause_s:g} s after an answer "
                                 f"too heavy to read every second ({self._why}); the pause doubles "
                                 f"while its answers stay so, up to {self.most_s:g} s")

    def heavy(self, why: str) -> None:
        """An answer too heavy to read again soon: pause (twice the last pause, unless calm came
        between)."""
        with self._lock:
            now = self._clock()
            calm = now - self._last > 2 * self.most_s
            self._pause_s = self.first_s if calm else min(self.most_s,
                                                          max(self.first_s, 2 * self._pause_s))
            self._until, self._last, self._why = now + self._pause_s, now, printable(why)[:200]
            self.counts["heavy_answers"] += 1
        log.warning("engine at %s: %s; not read for %g s (counted in %s{part=\"metrics\",what=\"heavy_answers\"})",
                    self.url, self._why, self._pause_s, ENGINE_INTAKE.metric)
