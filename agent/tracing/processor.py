"""A bounded batch span processor that never blocks the caller and counts every span's fate.

`on_end` (the engine or agent thread) only appends to a bounded deque under a short lock; when the
queue is full the new span is dropped and counted. One worker thread exports batches; a batch the
exporter fails (FAILURE or an exception) is counted as failed. After a flush or shutdown,
exported + dropped + failed equals the spans handed in (plus any batch still in flight when a
shutdown gave up waiting for it, counted when it returns).
"""

from __future__ import annotations

import logging
import threading
from collections import deque

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .counters import SpanCounters

log = logging.getLogger(__name__)


class CountingBatchProcessor(SpanProcessor):
    def __init__(self, exporter: SpanExporter, counters: SpanCounters, *,
                 max_queue_size: int = 2048, max_export_batch_size: int = 512,
                 schedule_delay_s: float = 1.0, shutdown_timeout_s: float = 5.0) -> None:
        self._exporter = exporter
        self._counters = counters
        self._max_queue = max_queue_size
        self._batch = min(max_export_batch_size, max_queue_size)
        self._delay = schedule_delay_s
        self._shutdown_timeout = shutdown_timeout_s
        self._queue: deque[ReadableSpan] = deque()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._in_flight = 0
        self._stopping = False      # no more spans accepted; worker drains and exits
        # shutdown gave up waiting: the worker must not start another batch
        self._abandoned = False
        self._submitted = 0
        self._worker = threading.Thread(target=self._run, name="stagelens-trace-export", daemon=True)
        self._worker.start()

    # -- caller side: O(1), never waits on the exporter
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if not span.context.trace_flags.sampled:
            return
        full = False
        with self._lock:
            self._submitted += 1
            dropped = self._stopping or len(self._queue) >= self._max_queue
            if not dropped:
                self._queue.append(span)
                full = len(self._queue) >= self._batch
        if dropped:
            self._counters.add("dropped", 1)
        elif full:
            self._wake.set()

    # -- worker side
    def _run(self) -> None:
        while True:
            self._wake.wait(self._delay)
            self._wake.clear()
            self._drain()
            with self._lock:
                if self._stopping and not self._queue:
                    return

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue or self._abandoned:
                    self._idle.notify_all()
                    return
                batch = [self._queue.popleft() for _ in range(min(self._batch, len(self._queue)))]
                self._in_flight = len(batch)
            try:
                ok = self._exporter.export(batch) is SpanExportResult.SUCCESS
            except Exception:
                log.warning("trace exporter raised; %d spans counted as failed", len(batch),
                            exc_info=True)
                ok = False
            self._counters.add("exported" if ok else "failed", len(batch))
            with self._lock:
                self._in_flight = 0

    def _settled(self) -> bool:
        return not self._queue and self._in_flight == 0

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export everything queued now; True when it all got an answer within the timeout."""
        self._wake.set()
        with self._lock:
            return self._idle.wait_for(self._settled, timeout_millis / 1000)

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Drain within the timeout, count what is left as dropped, then shut the exporter down."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
        self._wake.set()
        self._worker.join(self._shutdown_timeout if timeout_s is None else timeout_s)
        with self._lock:
            self._abandoned = True
            left = len(self._queue)
            self._queue.clear()
        self._counters.add("dropped", left)
        try:
            self._exporter.shutdown()   # aborts an OTLP exporter's retry backoff still in flight
        except Exception:
            log.warning("trace exporter shutdown raised", exc_info=True)

    def pending(self) -> dict[str, int]:
        with self._lock:
            return {"submitted": self._submitted, "queued": len(self._queue),
                    "in_flight": self._in_flight}
