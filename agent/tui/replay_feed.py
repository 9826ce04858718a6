"""A recorded bundle played back: one frame a poll, with pause and seek. Starts at the end,
paused: the state when recording stopped, with every transition in the event log; seek back or
press play."""

from __future__ import annotations

import threading

from stagelens.bundle import Bundle
from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.tui.feed import Feed, Poll


class ReplayFeed(Feed):
    kind = "replay"

    def __init__(self, bundle: Bundle, start: int | None = None, history: int = 600) -> None:
        super().__init__()
        if not bundle.frames:
            raise ValueError(f"{bundle.path}: the bundle holds no frames")
        self.bundle = bundle
        self.frames = bundle.frames
        self.history = history
        # read as `diagnose --replay` reads them (agent/bundle.py checked what replay reads of each)
        finished = (RequestTimeline.from_dict(t) for t in bundle.timelines if t.get("finished") is not None)
        self._timelines = sorted(finished, key=lambda t: t.finished)
        n = len(self.frames)
        self.position = n if start is None else max(1, min(n, start))
        self.paused = True
        self._reset = True
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        return f"replay {self.bundle.path}"

    @property
    def total(self) -> int:
        return len(self.frames)

    def seek(self, delta: int) -> None:
        with self._lock:
            self.position = max(1, min(self.total, self.position + delta))
            self._reset = True

    def seek_to(self, position: int) -> None:
        with self._lock:
            self.position = max(1, min(self.total, position))
            self._reset = True

    def set_paused(self, paused: bool) -> None:
        with self._lock:
            if not paused and self.position >= self.total:   # play from the end: start again
                self.position, self._reset = 1, True
            self.paused = paused

    def _timelines_between(self, after: float | None, upto: float) -> list[RequestTimeline]:
        return [t for t in self._timelines if (after is None or t.finished > after) and t.finished <= upto]

    def poll(self) -> Poll:
        with self._lock:
            if self._reset:
                self._reset = False
                shown = self.frames[max(0, self.position - self.history):self.position]
                upto = shown[-1].time_monotonic
                return Poll(list(shown), self._timelines_between(None, upto), reset=True,
                            position=(self.position, self.total))
            if self.paused or self.position >= self.total:
                if self.position >= self.total:
                    self.paused = True
                return Poll(position=(self.position, self.total))
            before = self.frames[self.position - 1].time_monotonic
            frame = self.frames[self.position]
            self.position += 1
            if self.position >= self.total:
                self.paused = True
            return Poll([frame], self._timelines_between(before, frame.time_monotonic),
                        position=(self.position, self.total))
