"""Trace exporter configuration: our config keys first, then the OTEL_* environment, then
defaults."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter

from stagelens.errors import UserError

EXPORTERS = ("otlp-http", "otlp-grpc", "console", "jsonl", "none")
DEFAULT_SERVICE_NAME = "stagelens"
_PROTOCOLS = {"http/protobuf": "otlp-http", "grpc": "otlp-grpc"}


@dataclass
class TracingConfig:
    # otlp-http | otlp-grpc | console | jsonl | none; else OTEL_TRACES_EXPORTER
    exporter: str | None = None
    # else OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT
    endpoint: str | None = None
    jsonl_path: str | None = None
    # used when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES names one
    service_name: str | None = None
    max_queue_size: int = 2048
    max_export_batch_size: int = 512
    schedule_delay_s: float = 1.0
    # per batch, retries included; else OTEL_EXPORTER_OTLP_*TIMEOUT
    export_timeout_s: float | None = None
    shutdown_timeout_s: float = 5.0

    @classmethod
    def coerce(cls, config: TracingConfig | Mapping | None) -> TracingConfig:
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        known = {f.name for f in fields(cls)}
        values = {str(k).replace("-", "_"): v for k, v in config.items()}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UserError(f"unknown tracing setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**values)

    def validate(self) -> None:
        for name in ("max_queue_size", "max_export_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UserError(f"tracing {name} must be a positive integer, got {value!r}")
        for name in ("schedule_delay_s", "export_timeout_s", "shutdown_timeout_s"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int | float) or value <= 0):
                raise UserError(f"tracing {name} must be a positive number of seconds, got {value!r}")


def exporter_name(config: TracingConfig) -> str:
    """The one exporter to use: config `exporter`, else OTEL_TRACES_EXPORTER, else OTLP over
    HTTP."""
    if config.exporter:
        names = [config.exporter.strip().lower()]
        source = "tracing exporter"
    else:
        names = [n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
        source = "OTEL_TRACES_EXPORTER"
    if len(names) > 1:
        raise UserError(f"{source} names {len(names)} exporters ({', '.join(names)}); stagelens uses one at a time")
    name = names[0] if names else "otlp"
    if name == "otlp":
        protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                    or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip().lower()
        if protocol not in _PROTOCOLS:
            raise UserError(f"OTLP protocol {protocol!r} is not supported; use http/protobuf or grpc")
        name = _PROTOCOLS[protocol]
    if name not in EXPORTERS:
        raise UserError(f"unknown trace exporter {name!r} ({source}); expected one of {', '.join(EXPORTERS)} or otlp")
    return name


def _http_traces_url(endpoint: str) -> str:
    """A base URL (http://collector:4318) gets the traces path; a full one is kept."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"OTLP/HTTP endpoint must be an http:// or https:// URL, got {endpoint!r}")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urlunsplit(parts)


def build_span_exporter(name: str, config: TracingConfig) -> SpanExporter | None:
    """The SDK exporter for `name` (None for `none`); the OTLP ones read the rest of OTEL_*
    themselves."""
    try:
        if name == "otlp-http":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            endpoint = _http_traces_url(config.endpoint) if config.endpoint else None
            return OTLPSpanExporter(endpoint=endpoint, timeout=config.export_timeout_s)
        if name == "otlp-grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            return OTLPSpanExporter(endpoint=config.endpoint or None,
                                    timeout=config.export_timeout_s)
    except ValueError as e:   # the SDK's own parsing of OTEL_EXPORTER_OTLP_* values
        raise UserError(f"bad OTLP exporter settings: {e}") from None
    if name == "console":
        return ConsoleSpanExporter(out=sys.stdout)   # looked up now: follows a redirected stdout
    if name == "jsonl":
        if not config.jsonl_path:
            raise UserError("the jsonl trace exporter needs jsonl_path")
        from .jsonl import JsonLinesSpanExporter

        try:
            return JsonLinesSpanExporter(config.jsonl_path)
        except OSError as e:
            raise UserError(f"cannot write trace file {config.jsonl_path}: {e.strerror or e}") from None
    return None


def service_resource(default_name: str | None = None) -> Resource:
    """The SDK's resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), named stagelens when
    they don't say."""
    resource = Resource.create({})
    named = str(resource.attributes.get(SERVICE_NAME, ""))
    if not named or named.startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: default_name or DEFAULT_SERVICE_NAME}))
    return resource
