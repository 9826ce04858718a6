"""The sampler: every interval, probes and the engine snapshot become a `Frame`, kept in a bounded
history and handed to listeners (recorders, exporters). Collection never raises: each collector
reports its own success and duration."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

from stagelens.engine_hooks.records.source import EngineSource
from stagelens.errors import CollectError
from stagelens.frame import Frame
from stagelens.probes.sample import CollectorStatus

log = logging.getLogger(__name__)

# (frame, request timelines finished since the last frame)
Listener = Callable[[Frame, list], None]


class Sampler:
    def __init__(self, node_probe=None, engine_source: EngineSource | None = None,
                 interval: float = 1.0, history: int = 900) -> None:
        if interval <= 0:
            raise ValueError(f"the sampling interval must be positive, got {interval}")
        self.node_probe = node_probe
        # a recorder, the lab's host, or a source read from outside
        self.engine_source = engine_source
        self.interval = interval
        self.history: deque[Frame] = deque(maxlen=history)
        self.listeners: list[Listener] = []
        self.listener_errors = 0
        self._last_timeline_end: float | None = None
        self._engine_trouble: str | None = None   # the engine source's last failure, logged once
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._hostname = socket.gethostname()

    def tick(self) -> Frame:
        return self.sample()[0]

    def sample(self) -> tuple[Frame, list]:
        """One frame, kept and handed to the listeners, with the request timelines finished since
        the previous one (the same the listeners got)."""
        now_unix, now_mono = time.time(), time.monotonic()
        frame = Frame(now_unix, now_mono, self._hostname)
        timelines: list = []
        if self.node_probe is not None:
            t = time.perf_counter()
            try:
                # the probe keeps one Topology while the GPUs stay the same, and it writes its JSON
                # once: every frame shares it instead of holding its own (a quarter of a DGX frame)
                sample = self.node_probe.sample()
                frame.node_sample = sample
                frame.collectors.extend(sample.collectors)
            except Exception as exc:  # a probe bug must not stop sampling
                frame.collectors.append(_status("node", False, t, exc))
        if self.engine_source is not None:
            t = time.perf_counter()
            try:
                frame.engine = self.engine_source.snapshot(now_mono)
                timelines = self.engine_source.recent_timelines(since=self._last_timeline_end)
                if timelines:
                    self._last_timeline_end = max(tl.finished for tl in timelines)
                frame.collectors.append(_status("engine", True, t))
                self._engine_trouble = None
            # an engine that does not answer: its reason when it changes, no traceback
            except CollectError as exc:
                if str(exc) != self._engine_trouble:
                    log.warning("engine: %s", exc)
                self._engine_trouble = str(exc)
                frame.collectors.append(_status("engine", False, t, exc))
            except Exception as exc:
                log.exception("engine snapshot failed")
                frame.collectors.append(_status("engine", False, t, exc))
        with self._lock:
            self.history.append(frame)
        for listener in list(self.listeners):
            try:
                listener(frame, timelines)
            except Exception:
                self.listener_errors += 1
                log.exception("a frame listener failed")
        return frame, timelines

    def frames(self, since: float | None = None) -> list[Frame]:
        with self._lock:
            return [f for f in self.history if since is None or f.time_unix > since]

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="stagelens-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.tick()
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay < 0:   # fell behind: skip, don't burst
                next_at = time.monotonic()
                delay = 0
            self._stop.wait(delay)


def _status(name: str, success: bool, started: float, exc: Exception | None = None) -> CollectorStatus:
    return CollectorStatus(name, success, time.perf_counter() - started,
                           None if exc is None else f"{type(exc).__name__}: {exc}")
