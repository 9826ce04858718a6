"""Exact accounting of the hooks on constructed cases."""

import logging

import pytest

from stagelens.engine_hooks import RecorderConfig, instrument, is_instrumented, uninstrument
from stagelens.engine_hooks.engine import EngineConfig, LLMEngine, SamplingParams
from stagelens.engine_hooks.engine import model as model_module
from stagelens.engine_hooks.records.timeline import BEHIND_LONG_PREFILL

TOKEN_BYTES = 512   # tiny preset, float32: 2 (K, V) * 2 layers * 2 kv heads * 16 dims * 4 bytes


def _engine(model_dir, **overrides) -> LLMEngine:
    cfg = dict(model="tiny", model_dir=model_dir, max_model_len=256, kv_cache_memory="4MiB",
               max_num_batched_tokens=256, max_num_seqs=8, device="cpu")
    cfg.update(overrides)
    return LLMEngine(EngineConfig(**cfg))


def _drive(engine):
    engine.run_until_idle(timeout=120)


def _config(**kw):
    return RecorderConfig(usage_interval_s=0.0, **kw)


_instrumented = []


def _instrument(engine, config=None):
    _instrumented.append(engine)
    return instrument(engine, config)


@pytest.fixture(autouse=True)
def _uninstrument_at_teardown():
    """Undo every test's instrumentation, so the shared attention patch is gone between tests."""
    yield
    while _instrumented:
        uninstrument(_instrumented.pop())


def test_a_17_token_prompt_fills_2_blocks_but_17_of_32_slots(model_dir):
    engine = _engine(model_dir)
    rec = _instrument(engine, _config())
    engine.submit(list(range(17)), SamplingParams(max_tokens=4))
    engine._drain_inbox()
    engine.step()
    first = rec.recent_steps()[0]
    assert (first["kv_slots_reserved"], first["kv_tokens_cached"]) == (32, 17)
    assert first["kv_useful_bytes"] == 17 * TOKEN_BYTES
    assert first["kv_moved_bytes"] == 32 * TOKEN_BYTES
    kv = rec.snapshot().window.kv
    assert kv.fragmentation_ratio == pytest.approx(15 / 32)
    assert kv.access_efficiency == pytest.approx(17 / 32)
    _drive(engine)


def test_contiguous_allocator_reservation_and_unusable_free_memory(model_dir):
    # 40 blocks; each request reserves max_model_len / block_size = 16 blocks: two fit, 8 blocks are left
    # that no request can use.
    engine = _engine(model_dir, allocator="contiguous", kv_cache_memory=40 * 16 * TOKEN_BYTES)
    rec = _instrument(engine, _config())
    for _ in range(3):
        engine.submit(list(range(40)), SamplingParams(max_tokens=30))
    engine._drain_inbox()
    engine.step()
    step = rec.recent_steps()[0]
    assert (step["kv_slots_reserved"], step["kv_tokens_cached"]) == (2 * 256, 2 * 40)
    snap = rec.snapshot()
    assert snap.usage.unusable_free_blocks == 8
    unusable = 8 * 16
    assert snap.window.kv.fragmentation_ratio == pytest.approx(
        (512 - 80 + unusable) / (512 + unusable))
    assert snap.counters.allocation_failures_total >= 1   # the third request was refused
    assert snap.counters.allocation_failures_with_free_memory_total >= 1   # while 20% was free
    _drive(engine)


def _long_and_shorts(model_dir, **overrides):
    """A long prompt; 4 short requests arrive while its first prefill step runs."""
    engine = _engine(model_dir, max_model_len=2048, kv_cache_memory="8MiB", **overrides)
    rec = _instrument(engine, _config(long_prefill_tokens=512))
    shorts = []
    forward = engine.runner.forward

    def submit_shorts_during_first_forward(inputs):
        if not shorts:
            shorts.extend(engine.submit(list(range(20)), SamplingParams(max_tokens=4)) for _ in range(4))
        return forward(inputs)

    engine.runner.forward = submit_shorts_during_first_forward
    long = engine.submit([7] * 1900, SamplingParams(max_tokens=4))
    _drive(engine)
    by_id = {t.request_id: t for t in rec.recent_timelines()}
    return by_id[long.request_id], [by_id[s.request_id] for s in shorts], rec


def test_long_prefill_without_chunking_blocks_the_short_requests_behind_it(model_dir):
    long, shorts, rec = _long_and_shorts(model_dir, enable_chunked_prefill=False, max_num_batched_tokens=2048)
    for t in shorts:
        behind = [w for w in t.waits if w.reason == BEHIND_LONG_PREFILL]
        assert behind and all(w.held_by == long.request_id and w.step == 1 for w in behind)
        assert t.chunks[0].step > long.chunks[0].step
    assert rec.snapshot().window.scheduler.head_of_line_share == pytest.approx(1.0)


def test_requests_queued_behind_a_long_prefill_step_still_running_are_waiting_in_the_snapshot(model_dir):
    """On a slow host one unchunked prefill step can last seconds: the requests that arrive meanwhile are not in
    the scheduler's queue yet, but their wait behind it is the scheduler's, seen before the step ends."""
    engine = _engine(model_dir, max_model_len=2048, kv_cache_memory="8MiB", enable_chunked_prefill=False,
                     max_num_batched_tokens=2048)
    rec = _instrument(engine, _config(long_prefill_tokens=512))
    during = []
    forward = engine.runner.forward

    def snapshot_during_the_long_prefill(inputs):
        if not during:
            shorts = [engine.submit(list(range(20)), SamplingParams(max_tokens=4)) for _ in range(3)]
            later = max(s.arrival_time for s in shorts) + 0.5
            during.append(rec.snapshot(now=later).window.scheduler)
        return forward(inputs)

    engine.runner.forward = snapshot_during_the_long_prefill
    engine.submit([7] * 1900, SamplingParams(max_tokens=4))
    _drive(engine)
    scheduler = during[0]
    assert scheduler.decided_wait_p99_s >= 0.5 and scheduler.wait_p99_s >= 0.5


def test_chunked_prefill_with_a_cap_lets_short_requests_through(model_dir):
    long, shorts, rec = _long_and_shorts(model_dir, enable_chunked_prefill=True, max_num_batched_tokens=256,
                                         long_prefill_token_threshold=128)
    assert len(long.chunks) == -(-1900 // 128)
    for t in shorts:
        assert not [w for w in t.waits if w.reason == BEHIND_LONG_PREFILL]
        assert t.first_token < long.first_token   # served while the long prompt is still prefilling
    assert rec.snapshot().window.scheduler.head_of_line_share == 0.0


def test_forced_preemption_shows_in_the_victims_timeline_and_counts_as_wait(model_dir):
    engine = _engine(model_dir, kv_cache_memory=8192 * 17)   # 17 blocks for 6 requests
    rec = _instrument(engine, _config())
    for i in range(6):
        engine.submit([i + 1] * 40, SamplingParams(max_tokens=40))
    _drive(engine)
    victims = [t for t in rec.recent_timelines() if t.preemptions]
    assert victims
    for t in victims:
        names = [e for _, e in t.events]
        assert "preempted" in names and "resumed" in names
        preempted_at = next(ts for ts, e in t.events if e == "preempted")
        resumed_at = next(ts for ts, e in t.events if e == "resumed" and ts > preempted_at)
        after = [w for w in t.waits if w.start >= preempted_at - 1e-9]
        assert after and all(w.reason == "preempted" for w in after)
        assert sum(w.seconds for w in after) == pytest.approx(resumed_at - preempted_at, abs=1e-3)
        assert t.scheduler_wait_s >= sum(w.seconds for w in after)
    events = [e for e in rec.recent_events() if e["event"] == "preempted"]
    assert len(events) == sum(t.preemptions for t in rec.recent_timelines())
    assert all(e["kv_free_blocks"] >= 0 and e["reason"] == "no_free_blocks" for e in events)
    assert rec.snapshot().counters.preemptions_total == len(events)


def test_cold_load_during_serving_is_recorded_with_step_times(model_dir):
    engine = _engine(model_dir, models=2, num_preload_models=1)
    rec = _instrument(engine, _config())
    with engine:
        hot = [engine.submit([1] * 30, SamplingParams(max_tokens=60), model="model-0") for _ in range(4)]
        while not rec.recent_steps():
            hot[0].wait(0.01)
        cold = engine.submit([2] * 10, SamplingParams(max_tokens=4), model="model-1")
        assert cold.wait(60) and all(r.wait(60) for r in hot)
    loads = rec.loads.items()
    assert [ld["model"] for ld in loads] == ["model-1"]
    assert loads[0]["ok"] and loads[0]["serving"]
    assert loads[0]["bytes"] == engine.residency.paths["model-1"].stat().st_size
    timeline = next(t for t in rec.recent_timelines() if t.request_id == cold.request_id)
    assert timeline.wait_by_reason().get("model_loading", 0) > 0
    steps = rec.recent_steps()
    assert any(s["loading"] for s in steps) and any(s["waiting_on_model"] for s in steps)
    cold_path = rec.snapshot(now=max(s["end"] for s in steps)).window.cold_path
    assert cold_path.loads_in_window == 1
    assert cold_path.step_time_during_load_s is not None and cold_path.step_time_inflation is not None


def test_uninstrument_leaves_no_wrapper_behind(model_dir):
    engine = _engine(model_dir)
    seams = [(engine, "submit"), (engine, "step"), (engine, "schedule"), (engine.scheduler, "preempt"),
             (engine.allocator, "allocate"),
             (engine.runner, "forward"), (engine.residency, "load")]
    before = {id(o): dict(vars(o)) for o, _ in seams}
    original_attention = model_module.paged_attention
    instrument(engine)
    assert is_instrumented(engine)
    assert all(name in vars(obj) for obj, name in seams)
    assert model_module.paged_attention is not original_attention
    uninstrument(engine)
    assert not is_instrumented(engine)
    for obj, _ in seams:
        assert vars(obj).keys() == before[id(obj)].keys()
    assert model_module.paged_attention is original_attention
    engine.submit([1, 2, 3], SamplingParams(max_tokens=3))
    _drive(engine)


def test_a_hook_that_raises_never_stops_the_engine(model_dir, caplog):
    engine = _engine(model_dir)
    rec = _instrument(engine, _config())

    def broken(*_):
        raise RuntimeError("hook bug")

    rec.on_forward = broken
    rec.on_step_end = broken
    reqs = [engine.submit([i + 1] * 10, SamplingParams(max_tokens=5)) for i in range(3)]
    with caplog.at_level(logging.ERROR, logger="stagelens.hooks"):
        _drive(engine)
    assert all(len(r.output_token_ids) == 5 for r in reqs)
    errors = rec.snapshot().hook_errors
    assert errors["forward"] == errors["step_end"] == engine.totals.steps
    logged = [r for r in caplog.records if "hook bug" in (r.exc_text or "") or r.exc_info]
    assert len(logged) == 2   # once per failing hook, not once per step
