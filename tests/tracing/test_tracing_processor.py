"""The bounded processor: the caller never waits, and every span is exported, dropped or failed."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from stagelens.tracing import TraceExporter
from tests.helpers.tracing_support import OFFSET, clear_otel_env, closed_port, small_timeline

SPANS_PER_TIMELINE = 4


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clear_otel_env(monkeypatch)


class Failing(SpanExporter):
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def export(self, spans):
        if self.mode == "raise":
            raise ConnectionError("collector gone")
        return SpanExportResult.FAILURE

    def shutdown(self):
        pass


class Gated(SpanExporter):
    """Holds every export until `gate` opens: a collector that stopped answering."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.spans = 0

    def export(self, spans):
        self.entered.set()
        self.gate.wait(10)
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        self.gate.set()


def accounted(stats) -> bool:
    return stats["exported"] + stats["dropped"] + stats["failed"] == stats["submitted"]


def test_ten_thousand_timelines_tiny_queue_dead_endpoint():
    registry = CollectorRegistry()
    exporter = TraceExporter.from_env(
        {"exporter": "otlp-http", "endpoint": f"http://127.0.0.1:{closed_port()}", "export_timeout_s": 0.2,
         "max_queue_size": 16, "max_export_batch_size": 8, "schedule_delay_s": 0.05},
        registry=registry, offset=OFFSET)
    ids = [exporter.export_timeline(small_timeline(f"r{i}", 10.0 + i)) for i in range(10_000)]
    exporter.flush(5)
    exporter.shutdown(5)
    stats = exporter.stats()
    assert None not in ids
    assert stats["submitted"] == 10_000 * SPANS_PER_TIMELINE
    assert stats["dropped"] > 0 and stats["failed"] > 0 and stats["exported"] == 0
    assert stats["queued"] == stats["in_flight"] == 0
    assert accounted(stats)
    for outcome in ("exported", "dropped", "failed"):
        value = registry.get_sample_value(f"stagelens_trace_spans_{outcome}_total", {"exporter": "otlp-http"})
        assert value == stats[outcome]


def test_stuck_exporter_queue_fills_and_drops_without_blocking():
    gated = Gated()
    exporter = TraceExporter(gated, name="gated", offset=OFFSET, max_queue_size=8, max_export_batch_size=4,
                             schedule_delay_s=10)   # only a full batch wakes the worker
    exporter.export_timeline(small_timeline("first"))
    assert gated.entered.wait(5)                    # the worker is stuck inside export()
    for i in range(100):                            # and the caller keeps going
        exporter.export_timeline(small_timeline(f"r{i}", 20.0 + i))
    stats = exporter.stats()
    assert stats["queued"] == 8 and stats["in_flight"] == 4
    assert stats["dropped"] == 101 * SPANS_PER_TIMELINE - 8 - 4
    gated.gate.set()
    assert exporter.flush(5)
    exporter.shutdown()
    stats = exporter.stats()
    assert stats["exported"] == gated.spans == 12 and accounted(stats)


def test_shutdown_counts_what_it_could_not_send_as_dropped():
    gated = Gated()
    exporter = TraceExporter(gated, name="gated", offset=OFFSET, max_queue_size=64, max_export_batch_size=4,
                             schedule_delay_s=10)
    exporter.export_timeline(small_timeline("first"))
    assert gated.entered.wait(5)
    for i in range(5):
        exporter.export_timeline(small_timeline(f"r{i}", 20.0 + i))
    exporter.shutdown(0.01)       # gives up on the stuck batch; Gated.shutdown then releases it
    stats = exporter.stats()
    assert stats["dropped"] == 5 * SPANS_PER_TIMELINE and stats["queued"] == 0
    assert exporter.flush(5)      # the batch in flight at shutdown is counted when the exporter answers
    assert accounted(exporter.stats()) and exporter.stats()["exported"] == 4
    assert exporter.export_timeline(small_timeline("late")) is not None
    assert exporter.stats()["dropped"] == 6 * SPANS_PER_TIMELINE    # after shutdown: dropped, counted


@pytest.mark.parametrize("mode", ["failure", "raise"])
def test_exporter_failures_are_counted(mode):
    registry = CollectorRegistry()
    exporter = TraceExporter(Failing(mode), name="broken", offset=OFFSET, registry=registry, schedule_delay_s=0.01)
    for i in range(3):
        exporter.export_timeline(small_timeline(f"r{i}", 10.0 + i))
    assert exporter.flush(5)
    exporter.shutdown()
    stats = exporter.stats()
    assert stats["failed"] == 12 and stats["exported"] == 0 and accounted(stats)
    assert registry.get_sample_value("stagelens_trace_spans_failed_total", {"exporter": "broken"}) == 12


def test_batches_respect_the_batch_size():
    class Recording(InMemorySpanExporter):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def export(self, spans):
            self.sizes.append(len(spans))
            return super().export(spans)

    sink = Recording()
    exporter = TraceExporter(sink, name="memory", offset=OFFSET, max_export_batch_size=3, schedule_delay_s=10)
    for i in range(5):
        exporter.export_timeline(small_timeline(f"r{i}", 10.0 + i))
    assert exporter.flush(5)
    exporter.shutdown()
    assert sum(sink.sizes) == 20 and max(sink.sizes) <= 3


def test_stats_are_plain_ints():
    exporter = TraceExporter(InMemorySpanExporter(), name="memory", offset=OFFSET)
    exporter.export_timeline(small_timeline("r"))
    exporter.shutdown()
    stats = exporter.stats()
    assert all(type(v) is int for v in stats.values())
    assert set(stats) >= {"exported", "dropped", "failed", "submitted", "queued", "in_flight", "timelines"}
