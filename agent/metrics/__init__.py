"""Prometheus exposition of frames and diagnoses (docs/design.md, Conventions: `stagelens_`
prefix, base units)."""

from stagelens.metrics.exporter import MetricsExporter
from stagelens.metrics.exposition import render
from stagelens.metrics.waits import WAIT_BUCKETS

__all__ = ["MetricsExporter", "WAIT_BUCKETS", "render"]
