"""The `/metrics` body for a client's Accept header: Prometheus text 0.0.4, or OpenMetrics 1.0.0
(with exemplars)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder


def render(registry: CollectorRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """(body, content type) for the Accept header; text 0.0.4 unless OpenMetrics is asked for."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
