"""Figures of the recorded window from per-request samples, the same for either target."""

from __future__ import annotations

from dataclasses import dataclass

from stagelens.engine_hooks.records.stats import latency_summary


@dataclass(frozen=True)
class Sample:
    arrival: float          # seconds from the start of the point
    ttft: float | None      # arrival to the first token (client side: to the first streamed chunk)
    latency: float | None   # arrival to the last token; None when it did not finish
    ok: bool = True


def in_window(samples: list[Sample], warmup: float, duration: float) -> list[Sample]:
    """Requests that arrived after the warm-up and before arrivals stopped."""
    return [s for s in samples if warmup <= s.arrival < duration]


def window_figures(samples: list[Sample]) -> dict:
    done = [s for s in samples if s.ok and s.latency is not None]
    ttft = [s.ttft for s in done if s.ttft is not None]
    latency = [s.latency for s in done]
    return {
        "requests": len(done),
        "requests_failed": len(samples) - len(done),
        **latency_summary(latency=latency, ttft=ttft),
    }
