"""One registry for the agent: the scrape-time collector plus the per-request wait metrics."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from agent.metrics.collector import StagelensCollector
from agent.metrics.exposition import render
from agent.metrics.waits import WaitMetrics


class MetricsExporter:
    """`latest_frame()` / `latest_diagnosis()` are read at each scrape; add `on_frame` as a sampler listener."""

    def __init__(self, latest_frame: Callable[[], object], latest_diagnosis: Callable[[], object] = lambda: None,
                 trace_id_for: Callable[[object], str | None] | None = None, vllm_names: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.collector = StagelensCollector(latest_frame, latest_diagnosis)
        self.registry.register(self.collector)
        self.waits = WaitMetrics(self.registry, trace_id_for, vllm_names)

    def on_frame(self, frame, timelines: list) -> None:
        self.waits.on_frame(frame, timelines)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        return render(self.registry, accept)
