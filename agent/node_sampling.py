"""This node sampled with its engine: the probes, an engine source and the sampler that joins them,
with one lifecycle. The runtime, the TUI's in-process feeds, the lab's runs and `sample_for` all
sample through it.

The engine source is any `EngineSource` (engine_hooks/records/source.py): the hosted lab engine,
whose own lifecycle is the lab's, or one read from outside (agent/sources), which runs services of
its own (span receiver, KV-events subscriber, gauge poll): those are started and closed with the
sampling.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from stagelens.engine_hooks.records.source import EngineSource
from stagelens.errors import UserError
from stagelens.frame import Frame
from stagelens.sampler import Listener, Sampler

THIS_PROCESS = os.getpid()


@runtime_checkable
class SourceServices(Protocol):
    """An engine source with services of its own, started before the first sample and closed
    after the last."""

    def start(self) -> None: ...

    def close(self) -> None: ...


class NodeSampling:
    def __init__(self, engine_source: EngineSource | None = None, nvml_snapshot: str | None = None,
                 interval: float = 1.0, history: int = 900, pid: int | None = THIS_PROCESS,
                 listeners: tuple[Listener, ...] = (), run_source_services: bool = True) -> None:
        """UserError for an NVML snapshot that cannot be read. `pid`: the process whose share of
        the host the probe reports (None: none). `run_source_services=False` leaves the source's
        services to the caller."""
        from stagelens.probes.sample import NodeProbe, open_backend

        try:
            backend = open_backend(nvml_snapshot)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        self.probe = NodeProbe(backend, pid=pid)
        self.engine_source = engine_source
        self.sampler = Sampler(node_probe=self.probe, engine_source=engine_source,
                               interval=interval, history=history)
        self.sampler.listeners.extend(listeners)
        self._services = engine_source if run_source_services and isinstance(engine_source, SourceServices) else None

    @property
    def interval(self) -> float:
        return self.sampler.interval

    def start_source(self) -> None:
        """The source's services (a receiver's port taken: UserError, and nothing left running)."""
        if self._services is not None:
            self._services.start()

    def start(self) -> None:
        """The source's services, then sampling on a thread of its own every interval."""
        self.start_source()
        self.sampler.start()

    def tick(self) -> tuple[Frame, list]:
        """One sample now, for feeds that poll: the frame and the request timelines finished
        since the previous sample. Nothing is kept for them between two: a sampler on its own
        thread (serve) has no one to take them, and kept they piled up for as long as it ran."""
        return self.sampler.sample()

    def frames(self, since: float | None = None) -> list[Frame]:
        return self.sampler.frames(since)

    def recent_timelines(self) -> list:
        """The request timelines the engine source keeps (an engine read from outside: from its
        spans)."""
        return [] if self.engine_source is None else self.engine_source.recent_timelines()

    def whatif_window(self) -> dict:
        """What `whatif --connect` replays: of the hosted engine its timelines, settings, steps
        and model loads; of an engine read from outside, its spans' timelines only."""
        window = getattr(self.engine_source, "whatif_window", None)
        if window is not None:
            return window()
        timelines = self.recent_timelines()
        return {"timelines": [t.to_dict() for t in timelines], "engine_config": None, "steps": [],
                "loads": []}

    def stop(self, before_last_frame: Callable[[], None] | None = None) -> None:
        """Stop the sampling thread and take one last frame (the requests that ended meanwhile
        reach the listeners); `before_last_frame` runs first (flush what the last frame should
        hold)."""
        self.sampler.stop()
        if before_last_frame is not None:
            before_last_frame()
        self.sampler.tick()

    def close(self) -> None:
        """The source's services and the probes."""
        if self._services is not None:
            self._services.close()
        self.probe.close()

    def run_for(self, duration: float, stop: threading.Event | None = None) -> list[Frame]:
        """Sample every interval on this thread for `duration`, or until `stop` is set; then
        close. The frames. A tick starts an interval after the one before started, or when that
        one ends if it took longer (a busy engine answering slowly): the next comes as the engine
        answers, not an interval after."""
        stop = stop or threading.Event()
        try:
            self.start_source()
            deadline = time.monotonic() + duration
            while not stop.is_set():
                next_at = time.monotonic() + self.interval
                self.sampler.tick()
                if next_at > deadline:
                    break
                stop.wait(max(0.0, next_at - time.monotonic()))
        finally:
            self.close()
        return self.sampler.frames()


def sample_for(nvml_snapshot: str | None, duration: float, interval: float = 1.0,
               engine_source: EngineSource | None = None, listeners: tuple[Listener, ...] = (),
               stop: threading.Event | None = None) -> list[Frame]:
    """The node (with `engine_source`: its engine too) sampled every `interval` seconds for
    `duration`, or until `stop` is set; the history's frames. An engine read from outside runs
    its span receiver and KV-events subscriber only meanwhile. UserError for an NVML snapshot
    that cannot be read."""
    sampling = NodeSampling(engine_source, nvml_snapshot, interval, pid=None, listeners=listeners)
    return sampling.run_for(duration, stop)
