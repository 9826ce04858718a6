"""Monotonic seconds → Unix epoch nanoseconds, with one offset captured once.

Timelines carry `time.monotonic()` seconds; spans need wall-clock epoch nanoseconds. Converting
every timestamp with the same offset keeps the span tree internally consistent (children never
drift against their parent) even if the wall clock is stepped while the agent runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ClockOffset:
    """epoch_ns - monotonic_ns, captured at exporter start and passed to whoever converts."""

    ns: int

    @classmethod
    def capture(cls) -> ClockOffset:
        return cls(time.time_ns() - time.monotonic_ns())

    def to_epoch_ns(self, monotonic_s: float) -> int:
        return round(monotonic_s * 1e9) + self.ns
