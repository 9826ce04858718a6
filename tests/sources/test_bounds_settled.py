"""Bounds that straddle a threshold never make a healthy server unknown (issue 45): vLLM's queue-time histogram
starts at (0, 0.3 s], so without spans its P99 is only bounded, at most 100x the mean (Markov). Where that bound
straddles a line, the queue's gauges settle it (Little's law: no request waiting at any sample is no wait), and
where nothing settles it the state the bounds guarantee stands, with the bound shown and why."""

import pytest

from stagelens.diagnosis.config import Threshold
from stagelens.diagnosis.evaluate import judged
from stagelens.diagnosis.signals import SIGNALS_BY_ID, Bounded, Unresolved
from tests.helpers.real_captures import Serving, capture
from tests.helpers.real_captures import judged as judged_capture

WAIT = SIGNALS_BY_ID["scheduler_wait_p99"]
LINES = Threshold(warn=0.005, firing=0.020)


@pytest.fixture
def idle_v1():
    # the capture's 6 queue times sum to 312 us (52 us each): growing as the counters do, the window's P99 is
    # in the first bucket and its Markov bound 5.2 ms, just past the 5 ms warn
    served = Serving(capture("vllm_v1_0.10_idle_qwen3_4b.txt"), per_s=0.05)
    yield served
    served.server.close()


def test_an_idle_v1_whose_markov_bound_passes_warn_reads_ok(idle_v1):
    result, frame = judged_capture(idle_v1, "vllm")
    bound = frame.engine.window.scheduler.decided_wait_p99_at_most_s
    assert bound == pytest.approx(0.0052, rel=0.05)        # the window straddles the 5 ms line
    assert result.verdict == "ok" and result.exit_code == 0, result.unavailable
    wait = next(e for e in result.stage("scheduler").evidence if e.signal == "scheduler_wait_p99")
    assert wait.state == "ok" and wait.bound == "at_most" and wait.value == pytest.approx(bound)
    assert "no request was waiting at any of the window's" in wait.how


def test_bounds_on_one_side_of_every_line_are_their_state():
    assert judged(WAIT, LINES, Bounded(0.0, 0.004))[0] == "ok"
    assert judged(WAIT, LINES, Bounded(0.3, 0.5))[0] == "firing"
    assert judged(WAIT, LINES, Bounded(0.3, None))[0] == "firing"


def test_an_estimate_settles_straddling_bounds_within_them():
    # Little's law says 30 ms of wait on average: firing, shown as the estimate
    assert judged(WAIT, LINES, Bounded(0.0, 0.0468, estimate=0.030)) == ("firing", 0.030)
    # an estimate past the upper bound is kept within it
    assert judged(WAIT, LINES, Bounded(0.0, 0.0100, estimate=0.5)) == ("warn", 0.0100)
    # no wait seen: what the bounds guarantee, the bound still shown
    state, value = judged(WAIT, LINES, Bounded(0.0, 0.0468, estimate=0.0))
    assert state == "ok" and isinstance(value, Bounded) and value.at_most == 0.0468


def test_unsettled_bounds_read_what_they_guarantee_never_unknown():
    state, value = judged(WAIT, LINES, Bounded(0.0, 0.0468))
    assert state == "ok" and isinstance(value, Unresolved)
    # at least 10 ms known: warn at the least, firing not excluded
    state, value = judged(WAIT, LINES, Bounded(0.010, 0.0468))
    assert state == "warn" and isinstance(value, Unresolved)
