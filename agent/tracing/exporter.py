"""TraceExporter: finished RequestTimelines in, span trees out, without ever blocking the caller."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.sampling import Sampler
from prometheus_client import CollectorRegistry

from stagelens.engine_hooks.records.timeline import RequestTimeline

from .clock import ClockOffset
from .config import TracingConfig, build_span_exporter, exporter_name, service_resource
from .counters import SpanCounters
from .parent import parent_context
from .processor import CountingBatchProcessor
from .spans import record_timeline

log = logging.getLogger(__name__)
# The OTLP exporters log every failed batch; ours are counted (stagelens_trace_spans_failed_total)
# and a dead collector must not flood the agent's log, so only their critical messages pass.
logging.getLogger("opentelemetry.exporter.otlp").setLevel(logging.CRITICAL)


class TraceExporter:
    """One per agent. `export_timeline` runs on the caller's thread and only queues spans.

    `span_exporter=None` (the `none` exporter) records nothing and returns no trace ids.
    The sampler is the SDK's own from OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG unless given.
    """

    def __init__(self, span_exporter: SpanExporter | None, *, name: str,
                 offset: ClockOffset | None = None, registry: CollectorRegistry | None = None,
                 resource: Resource | None = None, sampler: Sampler | None = None,
                 max_queue_size: int = 2048, max_export_batch_size: int = 512,
                 schedule_delay_s: float = 1.0, shutdown_timeout_s: float = 5.0) -> None:
        self.name = name
        self.offset = offset if offset is not None else ClockOffset.capture()
        self._counters = SpanCounters(name, registry)
        self._timelines = 0
        self._sampled_out = 0
        self._errors = 0
        self._processor: CountingBatchProcessor | None = None
        self._provider: TracerProvider | None = None
        self._tracer = None
        if span_exporter is not None:
            self._processor = CountingBatchProcessor(
                span_exporter, self._counters, max_queue_size=max_queue_size,
                max_export_batch_size=max_export_batch_size, schedule_delay_s=schedule_delay_s,
                shutdown_timeout_s=shutdown_timeout_s)
            self._provider = TracerProvider(sampler=sampler, resource=resource or service_resource())
            self._provider.add_span_processor(self._processor)
            self._tracer = self._provider.get_tracer("stagelens.tracing")

    @classmethod
    def from_env(cls, config: TracingConfig | Mapping | None = None, *, registry: CollectorRegistry | None = None,
                 offset: ClockOffset | None = None) -> TraceExporter:
        """Build from our config and the OTEL_* environment; bad settings raise UserError."""
        cfg = TracingConfig.coerce(config)
        cfg.validate()
        name = exporter_name(cfg)
        return cls(build_span_exporter(name, cfg), name=name, offset=offset, registry=registry,
                   resource=service_resource(cfg.service_name), max_queue_size=cfg.max_queue_size,
                   max_export_batch_size=cfg.max_export_batch_size,
                   schedule_delay_s=cfg.schedule_delay_s, shutdown_timeout_s=cfg.shutdown_timeout_s)

    @property
    def resource(self) -> Resource | None:
        return self._provider.resource if self._provider is not None else None

    def export_timeline(self, timeline: RequestTimeline, traceparent: str | None = None,
                        tracestate: str | None = None) -> str | None:
        """Queue the request's span tree; the trace id (32 hex) or None when nothing was
        recorded."""
        if self._tracer is None:
            return None
        self._timelines += 1
        try:
            root = record_timeline(self._tracer, timeline, self.offset,
                                   parent_context(traceparent, tracestate))
        except Exception:  # a malformed timeline must not take the engine thread down
            self._errors += 1
            log.warning("could not record the trace of request %s",
                        getattr(timeline, "request_id", "?"), exc_info=True)
            return None
        ctx = root.get_span_context()
        if not ctx.trace_flags.sampled:
            self._sampled_out += 1
            return None
        return format(ctx.trace_id, "032x")

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait up to `timeout` s for every queued span to be exported or failed; True if all
        were."""
        return self._processor.force_flush(int(timeout * 1000)) if self._processor is not None else True

    def shutdown(self, timeout: float | None = None) -> None:
        """Drain within `timeout` s (default: the configured one); what is still queued is
        counted dropped."""
        if self._processor is not None:
            self._processor.shutdown(timeout)
            self._provider.shutdown()

    def stats(self) -> dict[str, int]:
        out = {"timelines": self._timelines, "sampled_out": self._sampled_out,
               "errors": self._errors}
        out.update(self._counters.snapshot())
        out.update(self._processor.pending() if self._processor is not None
                   else {"submitted": 0, "queued": 0, "in_flight": 0})
        return out
