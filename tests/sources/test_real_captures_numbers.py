"""Honest numbers from coarse histograms: a quantile only where the buckets place it, else its bound; a signal
judged from bounds only where both fall on the same side of a threshold; on a real capture, vLLM's first
queue-time bucket (0, 0.3 s] with a 52 us mean."""

import math

import pytest

from stagelens.diagnosis.config import Threshold
from stagelens.diagnosis.evaluate import shown_value, signal_state
from stagelens.diagnosis.signals import SIGNALS_BY_ID, Bounded
from stagelens.sources.inference.wait_bounds import queue_wait_p99_bounds
from stagelens.sources.scrape.families import HistogramDelta, quantile, quantile_said
from tests.helpers.real_captures import Serving, capture, judged

WAIT = SIGNALS_BY_ID["scheduler_wait_p99"]


def histogram(counts: dict[float, float], total: float) -> HistogramDelta:
    """A window's histogram from {upper bound: cumulative count}; +Inf added."""
    buckets = sorted(counts.items()) + [(math.inf, max(counts.values()))]
    return HistogramDelta(buckets, max(counts.values()), total)


def test_a_quantile_is_a_value_only_where_its_bucket_places_it():
    # vLLM's queue time: 99 waits in (0, 0.3], one in (0.3, 0.5]
    first = histogram({0.3: 99, 0.5: 100}, total=0.01)
    assert quantile(first, 0.5) is None and quantile_said(first, 0.5) == "< 0.3 s"
    assert quantile(first, 0.999) == pytest.approx(0.3 + 0.2 * (99.9 - 99) / 1)
    # SGLang's TTFT: most past its last finite bound, 30 s
    clamped = HistogramDelta([(25.0, 10), (30.0, 20), (math.inf, 100)], 100, 5000.0)
    assert quantile(clamped, 0.5) is None and quantile_said(clamped, 0.99) == ">= 30 s"
    assert quantile_said(HistogramDelta([(0.3, 0), (math.inf, 0)], 0, 0.0), 0.5) is None


def test_the_p99_wait_bounds_from_buckets_mean_and_queue():
    above = queue_wait_p99_bounds(histogram({0.3: 50, 0.5: 99, 1.0: 100}, 30.0), [], None, 10.0, step=0.05)
    assert (above.at_least, above.at_most) == (pytest.approx(0.25), 0.5)
    # all in (0, 0.3 s], mean 52 us: at most 1% of waits exceed 5.2 ms (Markov), so the P99 is at most that
    markov = queue_wait_p99_bounds(histogram({0.3: 100}, 100 * 52e-6), [], None, 10.0)
    assert markov.at_least is None and markov.at_most == pytest.approx(100 * 52e-6) and "Markov" in markov.how
    assert queue_wait_p99_bounds(histogram({0.3: 100}, 100 * 0.01), [], None, 10.0).at_most == 0.3
    # no queue time observed: Little's law on a queue present at every scrape
    little = queue_wait_p99_bounds(None, [10.0, 14.0], left_per_s=2.0, span=10.0, step=0.5)
    assert little.at_least == pytest.approx(12 / 2 - 0.5) and "Little's law" in little.how
    assert queue_wait_p99_bounds(None, [10.0, 14.0], left_per_s=0.0, span=10.0).at_least == 10.0
    assert queue_wait_p99_bounds(None, [10.0, 0.0], left_per_s=2.0, span=10.0) is None   # not a standing queue


@pytest.mark.parametrize("bounds, state, shown", [
    (Bounded(0.0, 0.004), "ok", 0.004),          # under 5 ms whatever it is
    (Bounded(0.0, 0.0052), "ok", 0.0052),        # either side of 5 ms, nothing to settle it: what is guaranteed
    (Bounded(0.3, 0.5), "firing", 0.3),          # past 20 ms at the least
    (Bounded(0.3, None), "firing", 0.3),
    (Bounded(0.001, None), "ok", None),          # at least 1 ms, maybe more: no bound to show for ok
    (Bounded(0.006, 0.01), "warn", 0.006),
    (Bounded(0.006, None), "warn", 0.006),       # at least 6 ms: warn guaranteed, firing not excluded
])
def test_a_bounded_value_is_judged_by_what_its_bounds_guarantee(bounds, state, shown):
    assert signal_state(WAIT, Threshold(WAIT.warn, WAIT.firing), bounds) == state
    assert shown_value(bounds, state) == shown


def test_vllm_first_bucket_with_a_52us_mean_is_settled_by_the_queue_gauges():
    """The V1 capture's 6 requests queued 312 us in all: every wait in (0, 0.3 s], the mean 52 us. A P99 of
    0.15 s or 0.297 s would be made up; what is known is that it is at most 5.2 ms, either side of the 5 ms warn
    line, and that no request waited at any scrape: ok, shown as the bound, saying why (issue 45: it read unknown,
    and an idle server exited 3)."""
    served = Serving(capture("vllm_v1_0.10_idle_qwen3_4b.txt"), per_s=0.5)
    try:
        result, frame = judged(served, "vllm")
    finally:
        served.server.close()
    s = frame.engine.window.scheduler
    assert s.wait_p50_s is None and s.wait_p99_s is None and s.decided_wait_p99_s is None
    assert s.decided_wait_p99_at_most_s == pytest.approx(100 * 0.0003117750002274988 / 6)
    assert frame.engine.inferred["window.scheduler.wait_p99_s"].startswith("< 0.3 s")
    wait = next(e for e in result.stage("scheduler").evidence if e.signal == "scheduler_wait_p99")
    assert wait.state == "ok" and wait.bound == "at_most" and wait.provenance == "inferred"
    assert wait.value == pytest.approx(s.decided_wait_p99_at_most_s)
    assert "52 us" in wait.how and "Markov" in wait.how and "no request was waiting" in wait.how
    assert result.verdict == "ok"
