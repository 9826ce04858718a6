"""Scheduler metrics: queue, busy ratio, token budget, head-of-line blocking, waits, preemptions."""

from __future__ import annotations

from stagelens import catalogue as c
from stagelens.metrics.families import Scrape

# the figures read as the snapshot holds them; a counter is 0 until its first event (then rate() and
# increase() see it) and left out where the source does not count it
AS_HELD = (c.MAX_NUM_BATCHED_TOKENS, c.MAX_NUM_SEQS, c.WAITING, c.RUNNING, c.BUSY,
           c.BUSY_WHILE_WAITING, c.WAITING_STEPS, c.BUDGET_USE, c.HEAD_OF_LINE, c.STEP_MEAN,
           c.WAIT_P50, c.WAIT_P99, c.DECIDED_WAIT_P50, c.DECIDED_WAIT_P99, c.STEPS, c.BUSY_SECONDS,
           c.IDLE_SECONDS, c.SCHEDULED_TOKENS, c.FINISHED_REQUESTS, c.PREEMPTIONS,
           c.PREEMPTIONS_WITH_FREE_MEMORY, c.ALLOCATION_FAILURES,
           c.ALLOCATION_FAILURES_WITH_FREE_MEMORY)


def collect(out: Scrape, frame, _diagnosis) -> None:
    engine = frame.engine if frame else None
    if engine is None:
        return
    out.add_as_held(engine, AS_HELD)
    for reason, seconds in sorted((c.CHARGED_WAIT.read(engine) or {}).items()):
        out.add(c.CHARGED_WAIT, seconds, reason=reason)
