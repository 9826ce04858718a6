"""Prometheus exposition of frames and diagnoses (docs/design.md, Conventions: `stagelens_` prefix, base units)."""

from agent.metrics.exporter import MetricsExporter
from agent.metrics.exposition import render
from agent.metrics.waits import WAIT_BUCKETS

__all__ = ["MetricsExporter", "WAIT_BUCKETS", "render"]
