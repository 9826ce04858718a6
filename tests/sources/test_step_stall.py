"""A step longer than the scrape interval, read from outside
(agent/sources/inference/step_stall.py): vLLM's gauges and
histograms move once a step, so while one step outlasts the scrapes the scheduler's figures of the window are
not judged (never ok), and a wait seen growing across scrapes counts. Served for real on loopback; the scrapes
are given their times, so nothing depends on the clock."""

import pytest

from stagelens.diagnosis.evaluate import diagnose
from stagelens.engine_hooks.records.snapshot import EngineSnapshot
from stagelens.sources.inference.figures import Inferred
from stagelens.sources.inference.step_stall import NO_STEP, StepWatch, growing_wait, stalled_wait
from stagelens.sources.scrape.engine_source import VllmSource
from tests.helpers.frame_builders import frame
from tests.helpers.metrics_server import MetricsServer

LABELS = 'engine="0",model_name="m"'


def body(steps: int, running: int, waiting: int, kv: float = 0.3) -> str:
    """vLLM V1's scheduler gauges and its step histogram (iteration_tokens: one observation a step)."""
    return (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{LABELS}}} {running}\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{LABELS}}} {waiting}\n"
            f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{LABELS}}} {kv}\n"
            f"# TYPE vllm:iteration_tokens_total histogram\n"
            f'vllm:iteration_tokens_total_bucket{{{LABELS},le="2048.0"}} {steps}\n'
            f'vllm:iteration_tokens_total_bucket{{{LABELS},le="+Inf"}} {steps}\n'
            f"vllm:iteration_tokens_total_count{{{LABELS}}} {steps}\n"
            f"vllm:iteration_tokens_total_sum{{{LABELS}}} {steps * 10}\n")


@pytest.fixture
def engine():
    served = MetricsServer()
    yield served
    served.close()


def scrapes(engine, source: VllmSource, bodies: list[str], every_s: float = 1.0) -> list[EngineSnapshot]:
    out = []
    for i, text in enumerate(bodies):
        engine.body = text
        out.append(source.snapshot(100.0 + i * every_s))
    return out


def test_a_step_outlasting_the_scrapes_is_no_step_in_the_window_never_ok(engine):
    """One long prefill running, nothing seen waiting, the step count still for three scrapes: the scheduler's
    wait is not judged, with the reason, and the stage reads unknown, not ok."""
    source = VllmSource(engine.url)
    snaps = scrapes(engine, source, [body(100, 1, 0), body(110, 1, 0), body(110, 1, 0), body(110, 1, 0)])
    assert snaps[1].window.scheduler.no_step_for_s is None          # a step finished since the last scrape
    stalled = snaps[3].window.scheduler
    assert stalled.no_step_for_s == pytest.approx(2.0)
    assert stalled.decided_wait_p99_s is None and stalled.decided_wait_p99_at_least_s is None
    assert snaps[3].inferred["window.scheduler.decided_wait_p99_s"].startswith(NO_STEP)
    verdict = diagnose([frame(i, s) for i, s in enumerate(snaps)])
    assert verdict.stage("scheduler").state == "unknown", verdict.to_dict()
    # idle: nothing runs or waits, so a count standing still is no stall
    idle = scrapes(engine, VllmSource(engine.url), [body(5, 0, 0), body(5, 0, 0), body(5, 0, 0)])
    assert idle[2].window.scheduler.no_step_for_s is None


def test_requests_still_waiting_with_no_step_finished_have_waited_at_least_that_long(engine):
    """4 requests waiting at the last step's end and still at two scrapes 1 s apart, the count still: their
    wait has grown by 1 s at least (less one ordinary step, the window's mean period: 10 steps in 2 s): the
    scheduler's decided-wait P99 is at least 0.8 s, whatever the window's earlier figures said."""
    source = VllmSource(engine.url)
    snaps = scrapes(engine, source, [body(100, 1, 0), body(110, 2, 4), body(110, 2, 4)])
    grown = snaps[2].window.scheduler
    assert grown.decided_wait_p99_s is None
    assert grown.decided_wait_p99_at_least_s == pytest.approx(1.0 - 2.0 / 10)
    assert "still wait" in snaps[2].inferred["window.scheduler.decided_wait_p99_s"]


def test_a_growing_wait_needs_two_requests_and_a_free_kv_cache():
    assert growing_wait(3.0, 4, 0.1, kv_full=False).value == pytest.approx(2.9)
    assert growing_wait(3.0, 1, 0.1, kv_full=False) is None           # one request is no P99
    assert growing_wait(0.05, 4, 0.1, kv_full=False) is None          # within one ordinary step
    assert growing_wait(3.0, 4, 0.1, kv_full=True) is None            # the queue waits for blocks
    assert "KV cache is full" in stalled_wait(3.0, True, []).how


def test_what_the_window_showed_is_a_floor_while_no_step_finishes():
    """The requests unseen behind the step can only add to the P99: the window's figure stays, as a floor."""
    seen = Inferred(0.4, "the queue-time histogram's P99")
    floor = stalled_wait(3.0, False, [seen, None])
    assert floor.value == pytest.approx(0.4) and floor.how.startswith("the queue-time histogram's P99")
    assert stalled_wait(3.0, False, [seen, growing_wait(3.0, 4, 0.1, False)]).value == pytest.approx(2.9)
    assert stalled_wait(3.0, False, [Inferred(0.0, "none waited")]).value is None


def test_a_wait_seen_growing_stays_the_windows_floor_once_steps_move(engine):
    """The 4 requests seen waiting through a stall are admitted when the step ends; their spans come when they
    finish, so the windows after the step still hold the wait seen growing (2 s, less one step: 10 in 3 s), until it
    leaves the window (10 s)."""
    source = VllmSource(engine.url)
    texts = [body(100, 1, 0), body(110, 2, 4), body(110, 2, 4), body(110, 2, 4), body(120, 6, 0)]
    after = scrapes(engine, source, texts)[-1].window.scheduler
    assert after.no_step_for_s is None
    assert after.decided_wait_p99_at_least_s == pytest.approx(2.0 - 3.0 / 10)
    engine.body = body(130, 6, 0)
    assert source.snapshot(100.0 + 20).window.scheduler.decided_wait_p99_at_least_s is None   # out of the window


def test_the_step_watch_restarts_where_the_count_moves_or_goes():
    watch = StepWatch()
    assert watch.still_for(1.0, 10, busy=True) is None
    assert watch.still_for(2.0, 10, busy=True) == pytest.approx(1.0)
    assert watch.still_for(3.0, 11, busy=True) is None
    assert watch.still_for(4.0, 11, busy=False) is None
    assert watch.still_for(5.0, None, busy=True) is None
    assert watch.still_for(6.0, 11, busy=True) is None                     # a new count after none
