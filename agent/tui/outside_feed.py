"""An engine read from outside (vLLM, SGLang: agent/sources) sampled in-process with this node's
probes: each poll takes one sample. The TUI cannot restart that engine, so it shows the fix in
the engine's own flags and applies nothing. An engine that does not answer leaves the frame
without an engine: the TUI shows it STALE with the reason."""

from __future__ import annotations

from stagelens.node_sampling import NodeSampling
from stagelens.tui.feed import Feed, Poll, sampled


class OutsideFeed(Feed):
    kind = "outside"
    can_fix = False

    def __init__(self, engine_source, nvml_snapshot: str | None = None, interval: float = 1.0) -> None:
        super().__init__()
        self.engine_source = engine_source      # agent.sources.scrape.engine_source.VllmSource
        self.nvml_snapshot = nvml_snapshot
        self.interval = interval
        self._sampling: NodeSampling | None = None

    @property
    def label(self) -> str:
        return f"{self.engine_source.kind} at {self.engine_source.url}"

    def open(self) -> Poll:
        self._sampling = NodeSampling(self.engine_source, self.nvml_snapshot, self.interval)
        self._sampling.start_source()
        return Poll(note=f"reading {self.label}")

    def poll(self) -> Poll:
        if self.paused or self._sampling is None:
            return Poll()
        poll = sampled(self._sampling)
        engine = poll.frames[0].collector("engine")
        poll.error = None if engine is None or engine.success else f"{self.label}: {engine.error}"
        return poll

    def close(self) -> None:
        if self._sampling is not None:
            self._sampling.close()
