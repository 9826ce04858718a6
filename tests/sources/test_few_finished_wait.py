"""A scheduler-wait P99 from the spans of a handful of finished requests while many still wait is no P99 of the
queue: where the queue's own figures (Little's law) say those waiting wait longer, it is a lower bound, judged
and shown as one; otherwise it says how many requests it rests on."""

import time

import pytest

from stagelens.diagnosis.evaluate import diagnose
from stagelens.engine_hooks.records.timeline import QUEUED, PrefillChunk, RequestTimeline, Wait
from stagelens.sources.inference.figures import Inferred, decided_wait_p99
from stagelens.sources.inference.wait_bounds import WaitBounds
from tests.helpers.engine_stub import Engine, read_with_spans
from tests.helpers.frame_builders import frame
from tests.helpers.otlp_posts import vllm_spans


def went_in(i: int) -> RequestTimeline:
    """A request scheduled at once, its prefill 50 ms, its end a second later."""
    tl = RequestTimeline(f"r{i}", "m", 50, output_tokens=8, arrival=float(i), finished=i + 1.0, first_token=i + 0.05)
    tl.waits.append(Wait(float(i), float(i), QUEUED))
    tl.chunks.append(PrefillChunk(float(i), i + 0.05, 50, 0))
    return tl


@pytest.fixture
def engine():
    served = Engine()
    yield served
    served.close()


def test_a_handful_finished_while_more_wait_longer_is_a_lower_bound():
    few = [went_in(i) for i in range(4)]
    # 10 requests queued 2 s on average in the window (Little's law), 6 of them waiting now
    found = decided_wait_p99(few, 0.05, queued=(2.0, 10), waiting_now=6)
    assert isinstance(found, WaitBounds) and found.at_most is None
    assert found.at_least == pytest.approx(2.0 - 0.05)
    assert "only 4 requests finished in the window while 6 wait" in found.how
    # as many finished as make a P99, the same figure is the window's
    many = [went_in(i) for i in range(20)]    # agent.sources.inference.figures.MIN_FINISHED
    assert isinstance(decided_wait_p99(many, 0.05, queued=(2.0, 10), waiting_now=6), Inferred)


def test_without_the_queues_figures_the_few_requests_it_rests_on_are_said():
    found = decided_wait_p99([went_in(i) for i in range(4)], 0.05, waiting_now=6)
    assert isinstance(found, Inferred) and found.value == 0.0
    assert "only 4 requests finished in the window while 6 wait: the P99 of those 4, not of the queue" in found.how


LABELS = 'engine="0",model_name="m"'


def body(steps: int, queued: int, waiting: int) -> str:
    """vLLM V1's queue gauges, its KV cache 30% in use, its step histogram and `queued` queue-time observations."""
    return (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{LABELS}}} 2\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{LABELS}}} {waiting}\n"
            f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{LABELS}}} 0.3\n"
            f"# TYPE vllm:iteration_tokens_total histogram\n"
            f'vllm:iteration_tokens_total_bucket{{{LABELS},le="+Inf"}} {steps}\n'
            f"vllm:iteration_tokens_total_count{{{LABELS}}} {steps}\nvllm:iteration_tokens_total_sum{{{LABELS}}} 0\n"
            f"# TYPE vllm:request_queue_time_seconds histogram\n"
            f'vllm:request_queue_time_seconds_bucket{{{LABELS},le="0.3"}} {queued}\n'
            f'vllm:request_queue_time_seconds_bucket{{{LABELS},le="+Inf"}} {queued}\n'
            f"vllm:request_queue_time_seconds_count{{{LABELS}}} {queued}\n"
            f"vllm:request_queue_time_seconds_sum{{{LABELS}}} 0\n")


def test_read_from_vllm_the_few_spans_bound_the_wait_from_below_and_it_is_judged_so(engine):
    """6 requests waiting at both scrapes of the 10 s window, the KV cache 30% in use (60 s queued for the
    scheduler, by Little's law), 4 through the queue: their 4 spans, each scheduled at once, say nothing of the 6."""
    now_ns = time.time_ns()
    spans = vllm_spans(*[{"gen_ai.request.id": f"r{i}", "gen_ai.latency.time_in_queue": 0.0,
                          "gen_ai.latency.time_to_first_token": 0.05, "gen_ai.latency.time_in_model_prefill": 0.05,
                          "gen_ai.usage.prompt_tokens": 50, "start_ns": now_ns - 2_000_000_000 + i * 100_000_000}
                         for i in range(4)])
    _, snap = read_with_spans(engine, spans, [body(100, 0, 6), body(300, 4, 6)])
    s = snap.window.scheduler
    assert s.decided_wait_p99_s is None and s.decided_wait_p99_at_most_s is None
    # 60 s over the 10 requests queued in the window, less one step period (10 s / 200 steps)
    assert s.decided_wait_p99_at_least_s == pytest.approx(6.0 - 0.05)
    assert "only 4 requests finished" in snap.inferred["window.scheduler.decided_wait_p99_s"]
    wait = next(e for e in diagnose([frame(i, snap) for i in range(4)]).stage("scheduler").evidence
                if e.signal == "scheduler_wait_p99")
    assert (wait.state, wait.bound, wait.value) == ("firing", "at_least", pytest.approx(5.95))
