"""An engine read from outside (vLLM, SGLang: agent/sources) sampled in-process with this node's probes: each
poll takes one sample. The TUI cannot restart that engine, so it shows the fix in the engine's own flags
and applies nothing. An engine that does not answer leaves the frame without an engine: the TUI shows it
STALE with the reason."""

from __future__ import annotations

import os

from agent.tui.source import Poll, Source


class OutsideSource(Source):
    kind = "outside"
    can_fix = False

    def __init__(self, engine_source, nvml_snapshot: str | None = None, interval: float = 1.0) -> None:
        super().__init__()
        self.engine_source = engine_source      # agent.sources.vllm.VllmSource
        self.nvml_snapshot = nvml_snapshot
        self.interval = interval
        self._sampler = self._probe = None
        self._timelines: list = []

    @property
    def label(self) -> str:
        return f"{self.engine_source.kind} at {self.engine_source.url}"

    def open(self) -> Poll:
        from agent.sampler import Sampler
        from probes.sample import NodeProbe, open_backend

        self._probe = NodeProbe(open_backend(self.nvml_snapshot), pid=os.getpid())
        self._sampler = Sampler(node_probe=self._probe, engine_source=self.engine_source, interval=self.interval)
        self._sampler.listeners.append(lambda _frame, timelines: self._timelines.extend(timelines))
        self.engine_source.start()
        return Poll(note=f"reading {self.label}")

    def poll(self) -> Poll:
        if self.paused or self._sampler is None:
            return Poll()
        frame = self._sampler.tick()
        timelines, self._timelines = self._timelines, []
        engine = next((c for c in frame.collectors if c["name"] == "engine"), None)
        error = None if engine is None or engine["success"] else f"{self.label}: {engine['error']}"
        return Poll([frame], [t.to_dict() for t in timelines], error=error)

    def close(self) -> None:
        self.engine_source.close()
        if self._probe is not None:
            self._probe.close()
