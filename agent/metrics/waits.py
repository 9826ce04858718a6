"""Per-request scheduler wait: a histogram with trace-id exemplars and a counter of wait by reason.

Fed by the sampler with each finished `RequestTimeline`. Buckets start at 0.5 ms: the waits that
matter for short requests are milliseconds, below vLLM's first bucket (0.3 s).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram

from stagelens.catalogue import REQUEST_WAIT_BY_REASON, WAIT_HISTOGRAM
from stagelens.engine_hooks.records.vllm_names import REQUEST_QUEUE_TIME_SECONDS

WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                30.0, 60.0)


def first_queue_seconds(timeline) -> float | None:
    """Arrival to first scheduled: vLLM's queue time, which leaves out waits after a preemption."""
    scheduled = next((t for t, event in timeline.events if event == "scheduled"), None)
    return None if scheduled is None else max(0.0, scheduled - timeline.arrival)


class WaitMetrics:
    def __init__(self, registry: CollectorRegistry,
                 trace_id_for: Callable[[object], str | None] | None = None,
                 vllm_names: bool = False) -> None:
        self.trace_id_for = trace_id_for
        self.wait = Histogram(WAIT_HISTOGRAM.metric, WAIT_HISTOGRAM.help, buckets=WAIT_BUCKETS,
                              registry=registry)
        self.by_reason = Counter(REQUEST_WAIT_BY_REASON.metric, REQUEST_WAIT_BY_REASON.help,
                                 REQUEST_WAIT_BY_REASON.labels, registry=registry)
        self.vllm_queue = None
        # opt-in: vLLM's name and meaning, so existing vLLM dashboards read our figures
        if vllm_names:
            self.vllm_queue = Histogram(REQUEST_QUEUE_TIME_SECONDS,
                                        "Time requests spent in the WAITING phase before first scheduled.",
                                        ["model_name"], buckets=WAIT_BUCKETS, registry=registry)

    def observe(self, timeline, trace_id: str | None = None) -> None:
        exemplar = {"trace_id": trace_id} if trace_id else None
        self.wait.observe(timeline.scheduler_wait_s, exemplar=exemplar)
        for reason, seconds in timeline.wait_by_reason().items():
            self.by_reason.labels(reason=reason).inc(seconds)
        if self.vllm_queue is not None:
            queued = first_queue_seconds(timeline)
            if queued is not None:
                self.vllm_queue.labels(model_name=timeline.model).observe(queued, exemplar=exemplar)

    def on_frame(self, _frame, timelines: list) -> None:
        """A sampler listener. Register it after the tracing listener, whose trace ids
        `trace_id_for` looks up."""
        for timeline in timelines:
            self.observe(timeline, self._trace_id(timeline))

    def _trace_id(self, timeline) -> str | None:
        """The engine's own trace of the request where its span gave one (an outside engine: its
        trace is the one to jump to), else the trace this agent exported of it."""
        return timeline.trace_id or (self.trace_id_for(timeline) if self.trace_id_for else None)
