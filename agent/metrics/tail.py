"""The tail, explained, over the window: the P99 of TTFT and latency and the share of the tail's
time each stage took (agent.diagnosis.tail)."""

from __future__ import annotations

from stagelens import catalogue as c
from stagelens.diagnosis.signals import window_tail
from stagelens.diagnosis.tail import PARTS
from stagelens.metrics.families import Scrape


def collect(out: Scrape, frame, _diagnosis) -> None:
    if frame is None or frame.window is None:
        return
    for metric in ("ttft", "latency"):
        tail = window_tail(frame, metric)
        if tail is None:
            continue
        # not `quantile`: Prometheus keeps that label for summaries
        percentile = f"{tail.quantile * 100:g}"
        out.add(c.TAIL_SECONDS, tail.threshold_s, metric=metric, percentile=percentile)
        out.add(c.TAIL_SECONDS, tail.p50_s, metric=metric, percentile="50")
        for stage in PARTS:
            out.add(c.TAIL_SHARE, tail.share(stage), metric=metric, percentile=percentile,
                    stage=stage)
