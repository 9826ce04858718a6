"""Request traces: each finished RequestTimeline becomes an `llm_request` span tree exported over
OTLP.

    exporter = TraceExporter.from_env({"exporter": "otlp-http"}, registry=registry)
    trace_id = exporter.export_timeline(timeline, traceparent=request_headers.get("traceparent"))
    ...
    exporter.shutdown()
"""

from .clock import ClockOffset
from .config import EXPORTERS, TracingConfig
from .exporter import TraceExporter
from .jsonl import JsonLinesSpanExporter
from .processor import CountingBatchProcessor
from .spans import record_timeline

__all__ = ["EXPORTERS", "ClockOffset", "CountingBatchProcessor", "JsonLinesSpanExporter",
           "TraceExporter", "TracingConfig", "record_timeline"]
