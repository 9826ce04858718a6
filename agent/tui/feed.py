"""What every feed gives the TUI: `poll()` returns the frames (and request timelines) that are new.

A feed is a plain class, called from the poller's worker thread, never from the UI thread
(`control` methods such as `pause` or `seek` may be called from the UI thread: they only set flags).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.frame import Frame


@dataclass
class Poll:
    frames: list[Frame] = field(default_factory=list)
    # the requests finished since the last poll
    timelines: list[RequestTimeline] = field(default_factory=list)
    # the frames replace the history (a replay seek, a reconnect)
    reset: bool = False
    error: str | None = None            # the source did not answer: the TUI shows it STALE
    note: str | None = None             # what the source is doing ("starting the engine")
    position: tuple[int, int] | None = None   # replay: (frames shown, frames in the bundle)


class Feed:
    kind = "source"            # local | remote | replay
    can_fix = False            # whether `apply_fix` restarts an engine with new settings

    def __init__(self) -> None:
        self.paused = False

    @property
    def label(self) -> str:
        return self.kind

    def open(self) -> Poll | None:
        """Called once on the worker thread before the first poll; may return a status."""
        return None

    def poll(self) -> Poll:
        raise NotImplementedError

    def close(self) -> None:
        """Called on the worker thread when the TUI exits."""

    def set_paused(self, paused: bool) -> None:
        self.paused = paused

    def apply_fix(self, flags: dict) -> None:
        raise NotImplementedError(f"a {self.kind} source cannot apply a fix")

    def whatif_window(self) -> dict | None:
        """What what-if replays of the engine now (agent.lab.host.EngineHost.whatif_window),
        where the source has it."""
        return None


def sampled(sampling) -> Poll:
    """One sample of an in-process NodeSampling (agent/node_sampling.py) as a poll: its frame and
    timelines."""
    frame, timelines = sampling.tick()
    return Poll([frame], list(timelines))
