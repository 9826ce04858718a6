"""One point against a running OpenAI-compatible endpoint (`--url`): the HTTP load generator,
then the endpoint's own diagnosis when it is a stagelens agent (`GET /api/v1/diagnosis`; else the
stage is unknown)."""

from __future__ import annotations

import asyncio
import time

from stagelens.catalogue import BUSY_SECONDS
from stagelens.loadtest.loadgen import LoadOptions, LoadRun, generate_load
from stagelens.loadtest.point import Point, with_diagnosis
from stagelens.loadtest.stats import Sample, in_window, window_figures

BUSY_COUNTER = BUSY_SECONDS.metric


def metric_value(text: str, name: str) -> float | None:
    """The value of an unlabelled sample in Prometheus text exposition, None when absent."""
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{}"):
            try:
                return float(line.split()[-1])
            except ValueError:
                return None
    return None


async def scrape(client, base_url: str, name: str) -> tuple[float, float | None]:
    """(monotonic time, the counter's value) from the endpoint's /metrics; None where it has
    none."""
    try:
        r = await client.get(base_url.rstrip("/") + "/metrics", timeout=5.0)
        value = metric_value(r.text, name) if r.status_code == 200 else None
    except Exception:   # a server without /metrics: the figure is unknown, the run goes on
        value = None
    return time.monotonic(), value


async def _busy_over_window(base_url: str, warmup: float, duration: float) -> float | None:
    import httpx

    async with httpx.AsyncClient() as client:
        await asyncio.sleep(warmup)
        t0, b0 = await scrape(client, base_url, BUSY_COUNTER)
        await asyncio.sleep(max(0.0, duration - warmup))
        t1, b1 = await scrape(client, base_url, BUSY_COUNTER)
    if b0 is None or b1 is None or t1 <= t0:
        return None
    return max(0.0, min(1.0, (b1 - b0) / (t1 - t0)))


async def _run(base_url, cfg, opts, on_progress) -> tuple[LoadRun, float | None]:
    load, busy = await asyncio.gather(generate_load(base_url, cfg, opts, on_progress),
                                      _busy_over_window(base_url, cfg.warmup, cfg.duration))
    return load, busy


def fetch_diagnosis(base_url: str) -> dict | None:
    from stagelens.errors import CollectError
    from stagelens.http_client import get_json

    try:
        d = get_json(base_url, "/api/v1/diagnosis")
    except CollectError:
        return None
    return d if isinstance(d, dict) and "verdict" in d else None


def measure_remote(value, base_url: str, cfg, opts: LoadOptions | None = None, on_progress=None) -> Point:
    load, busy = asyncio.run(_run(base_url, cfg, opts or LoadOptions(), on_progress))
    samples = [Sample(r.sent, r.first_chunk - r.sent if r.first_chunk is not None else None,
                      r.done - r.sent if r.done is not None else None, r.ok) for r in load.records]
    figures = window_figures(in_window(samples, cfg.warmup, cfg.duration))
    window = cfg.duration - cfg.warmup
    errors = sorted({r.error for r in load.records if r.error})[:3]
    point = Point(value, throughput_tokens_per_s=load.tokens_between(cfg.warmup, cfg.duration) / window,
                  engine_busy_ratio=busy,
                  extra={"requests_sent": len(load.records),
                         "requests_finished_total": load.finished,
                         "output_tokens": sum(r.output_tokens for r in load.records),
                         "errors": errors},
                  **figures)
    return with_diagnosis(point, fetch_diagnosis(base_url))
