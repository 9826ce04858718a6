"""The gauge poll between scrapes (agent/sources/scrape/gauge_poll.py): a queue that comes and goes
between two
scrapes, as the requests a short model load defers, is counted in the window; a failed poll is counted and
skipped. Served for real on loopback (tests/sources/test_engine_sources.py's Engine); polls are driven one by one."""

import time

import pytest

from stagelens.engine_hooks.records.waits import MODEL_LOADING, NO_FREE_BLOCKS
from stagelens.sources.scrape.engine_source import VllmSource
from tests.helpers.engine_stub import Engine


def body(waiting: int, deferred: int) -> str:
    """vLLM's queue gauges for one engine serving LoRA adapters, `deferred` of the `waiting` held for an adapter."""
    labels = 'engine="0",model_name="m"'
    return (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{labels}}} 1\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{labels}}} {waiting}\n"
            f"# TYPE vllm:num_requests_waiting_by_reason gauge\n"
            f'vllm:num_requests_waiting_by_reason{{{labels},reason="capacity"}} {waiting - deferred}\n'
            f'vllm:num_requests_waiting_by_reason{{{labels},reason="deferred"}} {deferred}\n'
            f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{labels}}} 0.1\n"
            f"# TYPE vllm:lora_requests_info gauge\n"
            f'vllm:lora_requests_info{{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""}} 1.7e9\n'
            # a family the poll does not read, broken: the poll skips its lines
            "# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=} x\n")


@pytest.fixture
def engine():
    served = Engine(body(0, 0))
    yield served
    served.close()


def _window_after_a_short_load(engine: Engine, source: VllmSource, polls: int):
    """Two scrapes that find no queue, and between them `polls` polls that find two requests deferred."""
    engine.body = body(0, 0).rsplit("# TYPE vllm:e2e", 1)[0]    # the scrape reads every family: a sound body
    source.snapshot(time.monotonic())
    engine.body = body(2, 2)
    for _ in range(polls):
        assert source.poller is None or source.poller.poll() is not None
    engine.body = body(0, 0).rsplit("# TYPE vllm:e2e", 1)[0]
    return source.snapshot(time.monotonic())


def test_requests_deferred_between_scrapes_are_seen_only_through_the_poll(engine):
    polled = VllmSource(engine.url, poll_s=0.25)
    snap = _window_after_a_short_load(engine, polled, polls=3)
    # 3 polls with 2 deferred and the scrape with none: 1.5 requests waiting on a model on average (Little's law)
    assert snap.window.scheduler.wait_seconds_by_reason[MODEL_LOADING] == pytest.approx(1.5 * snap.window.span_s)
    assert snap.window.scheduler.waiting_share == pytest.approx(3 / 4)
    assert snap.intake["gauge_poll.polls"] == 3 and snap.intake["gauge_poll.failed"] == 0
    # the scrapes alone saw no queue at all
    blind = _window_after_a_short_load(engine, VllmSource(engine.url), polls=3)
    assert blind.window.scheduler.wait_seconds_by_reason[MODEL_LOADING] == 0.0


def test_a_failed_poll_is_counted_and_leaves_no_sample(engine):
    source = VllmSource(engine.url, poll_s=0.25)
    engine.body = "vllm:num_requests_waiting{engine=} nope\n"
    assert source.poller.poll() is None
    engine.close()
    assert source.poller.poll() is None
    assert source.poller.counts == {"polls": 2, "failed": 2, "paused": 0}
    assert source.poller.samples(0.0, time.monotonic()) == []


def test_the_poll_runs_on_its_own_thread_until_stopped(engine):
    source = VllmSource(engine.url, poll_s=0.01)
    source.start()
    try:
        deadline = time.monotonic() + 30
        while len(source.poller.samples(0.0, time.monotonic())) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        source.close()
    taken = source.poller.counts["polls"]
    assert taken >= 3 and source.poller.counts["failed"] == 0
    assert source.poller.counts["polls"] == taken      # stopped: no more polls
    source.close()                                     # closing twice is harmless


def kv_body(kv_usage: float, waiting: int, preempted: int) -> str:
    """vLLM's queue and KV gauges with no adapters: `waiting` queued, the cache `kv_usage` full."""
    labels = 'engine="0",model_name="m"'
    return (f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{{labels}}} 4\n"
            f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{{labels}}} {waiting}\n"
            f"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{{labels}}} {kv_usage}\n"
            f"# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{{{labels}}} {preempted}\n")


def test_a_full_kv_cache_between_scrapes_is_the_kv_caches_evidence(engine):
    """The face sets KV usage after each step, so a scrape can land where the cache reads free and nothing waits
    while the polls in between found it full with a queue and preemptions: the KV cache's evidence (the share
    of samples full while requests waited) must count the polls, as the charge of the wait to no free blocks
    (wait_seconds_by_reason) already does."""
    source = VllmSource(engine.url, poll_s=0.25)
    engine.body = kv_body(0.2, 0, 0)
    source.snapshot(time.monotonic())
    for preempted in (1, 2, 3):
        engine.body = kv_body(0.97, 3, preempted)
        assert source.poller.poll() is not None
    engine.body = kv_body(0.2, 0, 3)
    snap = source.snapshot(time.monotonic())
    # 4 samples after the first: 3 polls full with a queue, the closing scrape free with none
    assert snap.window.kv.full_while_waiting_share == pytest.approx(3 / 4)
    assert snap.window.scheduler.wait_seconds_by_reason[NO_FREE_BLOCKS] > 0
