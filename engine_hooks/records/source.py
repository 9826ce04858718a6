"""The engine source: what the sampler reads each tick, whether the engine is the bundled one
(its host, agent/lab/host.py, or the flight recorder itself) or one read from outside
(agent/sources/)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from stagelens.engine_hooks.records.snapshot import EngineSnapshot
from stagelens.engine_hooks.records.timeline import RequestTimeline


@runtime_checkable
class EngineSource(Protocol):
    def snapshot(self, now_monotonic: float) -> EngineSnapshot:
        """The engine's snapshot at `now_monotonic`; what the source cannot observe is None."""
        ...

    def recent_timelines(self, since: float | None = None) -> list[RequestTimeline]:
        """The timelines of requests finished after `since` (monotonic; None: all those kept)."""
        ...
