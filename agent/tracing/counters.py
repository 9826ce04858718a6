"""What became of every span handed to the exporter: exported, dropped or failed.

Plain ints for `stats()`, mirrored into prometheus_client Counters when a registry is given.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter

from stagelens.catalogue import TRACE_SPANS

OUTCOMES = tuple(TRACE_SPANS)


class SpanCounters:
    def __init__(self, exporter: str, registry: CollectorRegistry | None = None) -> None:
        self.exporter = exporter
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(OUTCOMES, 0)
        self._prom = {}
        if registry is not None:
            for outcome in OUTCOMES:
                figure = TRACE_SPANS[outcome]
                counter = Counter(figure.metric, figure.help, figure.labels, registry=registry)
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
