"""What became of every span handed to the exporter: exported, dropped or failed.

Plain ints for `stats()`, mirrored into prometheus_client Counters when a registry is given.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter

OUTCOMES = ("exported", "dropped", "failed")
_HELP = {
    "exported": "Spans the trace exporter accepted.",
    "dropped": "Spans dropped before export: queue full, or still queued at shutdown.",
    "failed": "Spans in a batch the trace exporter failed (returned FAILURE or raised).",
}


class SpanCounters:
    def __init__(self, exporter: str, registry: CollectorRegistry | None = None) -> None:
        self.exporter = exporter
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(OUTCOMES, 0)
        self._prom = {}
        if registry is not None:
            for outcome in OUTCOMES:
                counter = Counter(f"stagelens_trace_spans_{outcome}", _HELP[outcome], ["exporter"], registry=registry)
                self._prom[outcome] = counter.labels(exporter=exporter)

    def add(self, outcome: str, n: int) -> None:
        if n <= 0:
            return
        with self._lock:
            self._counts[outcome] += n
        if outcome in self._prom:
            self._prom[outcome].inc(n)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
