"""Serving figures from finished requests: throughput, TTFT, TPOT, latency percentiles."""

from __future__ import annotations

from stagelens.engine_hooks.engine.request import Request
from stagelens.engine_hooks.records.stats import latency_summary


def summarize(requests: list[Request], elapsed: float, window_s: float, window_tokens: int) -> dict:
    """Figures of a run. Throughput counts the tokens made inside the measured window (arrivals on,
    warm-up excluded), so the drain at the end does not dilute it."""
    done = [r for r in requests if r.finished and r.finish_reason != "error"]
    ttft = [r.first_event_time("first_token") - r.arrival_time for r in done]
    latency = [r.first_event_time("finished") - r.arrival_time for r in done]
    tpot = [(r.first_event_time("finished") - r.first_event_time("first_token")) / (len(r.output_token_ids) - 1)
            for r in done if len(r.output_token_ids) > 1]
    out_tokens = sum(len(r.output_token_ids) for r in done)
    return {
        "elapsed_s": elapsed,
        "requests_submitted": len(requests),
        "requests_finished": len(done),
        "requests_failed": sum(1 for r in requests if r.finish_reason == "error"),
        "output_tokens": out_tokens,
        "throughput_tokens_per_s": window_tokens / window_s if window_s > 0 else 0.0,
        **latency_summary(ttft=ttft, tpot=tpot, latency=latency),
        "preemptions": sum(r.num_preemptions for r in requests),
    }
