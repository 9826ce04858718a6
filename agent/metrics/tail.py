"""The tail, explained, over the window: the P99 of TTFT and latency and the share of the tail's time
each stage took (agent.diagnosis.tail)."""

from __future__ import annotations

from stagelens.diagnosis.signals import window_tail
from stagelens.diagnosis.tail import PARTS
from stagelens.metrics.families import Scrape

SECONDS = "The window's requests' TTFT or latency at the quantile (the tail starts at the 99th)."
SHARE = ("Share of the P99 tail's time charged to each stage (compute: the requests' own work and step "
         "boundaries; queued: queue time whose reason the engine did not publish, charged to no stage), over the "
         "window.")


def collect(out: Scrape, frame, _diagnosis) -> None:
    if frame is None or frame.window is None:
        return
    for metric in ("ttft", "latency"):
        tail = window_tail(frame, metric)
        if tail is None:
            continue
        percentile = f"{tail.quantile * 100:g}"   # not `quantile`: Prometheus keeps that label for summaries
        out.gauge("stagelens_tail_seconds", SECONDS, tail.threshold_s, metric=metric, percentile=percentile)
        out.gauge("stagelens_tail_seconds", SECONDS, tail.p50_s, metric=metric, percentile="50")
        for stage in PARTS:
            out.gauge("stagelens_tail_share", SHARE, tail.share(stage), metric=metric, percentile=percentile,
                      stage=stage)
