"""What an engine's coarse queue-time histogram and its queue gauges can say of the P99 wait,
without spans.

vLLM's queue-time buckets start at (0, 0.3 s]: a P99 there could be 50 us or 290 ms, on either side
of the scheduler's 5 ms and 20 ms lines, and interpolating inside the bucket makes a number up. So
only bounds are said: a bucket starting above zero bounds the P99 from below; the first bucket
bounds it from above, and the mean (_sum/_count) tightens that: at most 1% of waits can exceed 100
times the mean (Markov's inequality). Without observations in the window, Little's law on the
queue's gauges: a queue present at every scrape, with so many requests a second leaving it, is
waited on for its mean wait. The diagnosis judges a signal from its bounds where both ends fall on
the same side of a threshold (agent.diagnosis.signals.Bounded); where they straddle one, the queue's
gauges give an estimate that settles it: Little's law's mean wait, the requests seen waiting at the
window's samples over those leaving the queue a second (0 where none waited at any sample).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stagelens.sources.scrape.families import HistogramDelta, histogram_mean, quantile_bounds

MARKOV_FACTOR = 100      # P(wait > 100 x mean) <= 1%: the P99 is at most 100 x the mean


@dataclass(frozen=True, slots=True)
class WaitBounds:
    at_least: float | None
    at_most: float | None
    how: str
    # Little's law's mean wait on the queue's gauges, where the histogram leaves only bounds
    estimate: float | None = None


def queue_wait_p99_bounds(queue: HistogramDelta | None, waiting: list[float], left_per_s: float | None,
                          span: float, step: float | None = None) -> WaitBounds | None:
    """Bounds of the P99 of the wait the scheduler decided (the queue time less a step, `step`,
    which any scheduler makes a request arriving mid-step wait), from the window's queue-time
    histogram, else from the queue's gauges at each scrape (`waiting`) and the requests leaving
    it a second (`left_per_s`)."""
    bucket = quantile_bounds(queue, 0.99)
    if bucket is not None:
        lower, upper = bucket
        if lower > 0:
            at_most = None if math.isinf(upper) else upper
            return WaitBounds(max(0.0, lower - (step or 0.0)), at_most,
                              f"the queue-time histogram's P99 is in its bucket ({lower:g}, "
                              f"{upper:g}] s: queued at least {lower:g} s{_less_step(step)}")
        mean = histogram_mean(queue)
        how = f"the queue-time histogram's P99 is in its first bucket, (0, {upper:g}] s"
        if mean is not None and MARKOV_FACTOR * mean < upper:
            upper = MARKOV_FACTOR * mean
            how += (f"; its mean is {_said(mean)} and at most 1% of waits can exceed "
                    f"{MARKOV_FACTOR} times the mean (Markov's inequality): at most {_said(upper)}")
        estimate, said = _little_estimate(waiting, left_per_s, step)
        return WaitBounds(None, upper, how + said, estimate)
    if not waiting or min(waiting) <= 0 or left_per_s is None or span <= 0:
        return None
    queued = sum(waiting) / len(waiting)
    if left_per_s <= 0:
        return WaitBounds(span, None, f"{queued:.0f} requests waiting at every one of "
                                      f"{len(waiting)} scrapes and none left the queue: they "
                                      f"waited at least the {span:.0f} s window")
    mean_wait = queued / left_per_s
    return WaitBounds(max(0.0, mean_wait - (step or 0.0)), None,
                      f"{queued:.0f} requests waiting at every one of {len(waiting)} scrapes, "
                      f"{left_per_s:.2f} a second leaving the queue: {_said(mean_wait)} of wait on "
                      f"average (Little's law), which a queue present throughout makes most "
                      f"requests wait{_less_step(step)}")


def _little_estimate(waiting: list[float], left_per_s: float | None,
                     step: float | None) -> tuple[float | None, str]:
    """Little's law's mean wait from the requests seen waiting at the window's samples and those
    leaving the queue a second, with how it was read; (None, "") where the gauges do not give it."""
    if not waiting:
        return None, ""
    queued = sum(waiting) / len(waiting)
    if queued == 0:
        return 0.0, f"; no request was waiting at any of the window's {len(waiting)} samples"
    if not left_per_s:
        return None, ""
    mean_wait = max(0.0, queued / left_per_s - (step or 0.0))
    return mean_wait, (f"; {queued:.1f} requests waiting on average at the window's "
                       f"{len(waiting)} samples, {left_per_s:.2f} a second leaving the queue: "
                       f"{_said(mean_wait)} of wait on average (Little's law){_less_step(step)}")


def _less_step(step: float | None) -> str:
    """What the bound of the decided wait leaves out of the queue time: the step in progress at
    arrival."""
    if not step:
        return ""
    return f", less one step period ({_said(step)}) that any scheduler makes a request arriving mid-step wait"


def _said(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"
