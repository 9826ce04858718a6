"""Fault isolation in the real engine: whatever one request does, or whatever breaks in one step, the
others are served, the failed ones carry their reason, no KV block leaks and the counters say what
happened. Faults are injected by wrapping one seam of the running engine for one poisoned request."""

import math
import time

import pytest
import torch

from stagelens.engine_hooks import instrument, uninstrument
from stagelens.engine_hooks.engine import EngineConfig, EngineStopped, FinishReason, LLMEngine, SamplingParams
from stagelens.engine_hooks.engine.sampler import NON_FINITE_LOGITS

POISON = "poisoned"


def _engine(model_dir, **overrides) -> LLMEngine:
    cfg = dict(model="tiny", model_dir=model_dir, max_model_len=256, kv_cache_memory="4MiB",
               max_num_batched_tokens=64, max_num_seqs=8, device="cpu")
    cfg.update(overrides)
    return LLMEngine(EngineConfig(**cfg))


def _submit_mix(engine, n=4, max_tokens=6):
    """A poisoned request among healthy ones, all in flight together; with two models the poisoned one
    is alone in its model's forward pass, the unit a step fails by."""
    healthy = [engine.submit([3, 4, 5 + i] * 5, SamplingParams(max_tokens=max_tokens)) for i in range(n)]
    poisoned = engine.submit([7, 8, 9] * 5, SamplingParams(max_tokens=max_tokens), request_id=POISON,
                             model=engine.model_names[-1])
    return healthy, poisoned


def _run(engine, timeout=60.0):
    engine.run_until_idle(timeout)


def _assert_no_leak(engine):
    assert engine.allocator.num_free_blocks() == engine.allocator.num_blocks
    assert not engine.scheduler.running and not engine.scheduler.waiting


def _assert_still_serves(engine):
    later = engine.submit([1, 2, 3], SamplingParams(max_tokens=4))
    _run(engine)
    assert later.finish_reason == FinishReason.LENGTH and len(later.output_token_ids) == 4


def _poison(obj, name, should_raise):
    """Wrap `obj.name` so that it raises when `should_raise(*args)` says so."""
    original = getattr(obj, name)

    def wrapper(*args, **kwargs):
        if should_raise(*args):
            raise RuntimeError(f"injected fault in {name}")
        return original(*args, **kwargs)
    setattr(obj, name, wrapper)


def _has_poison_group(group) -> bool:
    return any(r.request_id == POISON for r, _ in group)


def _has_poison_inputs(inputs, *_rest) -> bool:
    return any(r.request_id == POISON for r in inputs.requests)


@pytest.mark.parametrize("phase, inject", [
    ("schedule", lambda e: _poison(e.allocator, "allocate", lambda rid, _n: rid == POISON)),   # allocation failure
    ("prepare", lambda e: _poison(e.runner, "prepare", _has_poison_group)),
    ("forward", lambda e: _poison(e.runner, "forward", _has_poison_inputs)),
    ("sample", lambda e: _poison(e.runner, "sample", _has_poison_inputs)),
])
def test_a_fault_in_one_phase_fails_only_the_requests_it_concerns(model_dir, phase, inject, caplog):
    engine = _engine(model_dir, models=2, num_preload_models=2)
    inject(engine)
    healthy, poisoned = _submit_mix(engine)
    _run(engine)
    assert poisoned.finish_reason == FinishReason.ERROR
    assert phase in poisoned.error and "injected fault" in poisoned.error
    assert all(r.finish_reason == FinishReason.LENGTH and len(r.output_token_ids) == 6 for r in healthy)
    assert engine.step_errors[phase] == 1 and sum(engine.step_errors.values()) == 1
    assert engine.finish_reasons[FinishReason.ERROR] == 1
    _assert_no_leak(engine)
    _assert_still_serves(engine)
    # logged once, with the traceback
    logged = [r for r in caplog.records if "engine step failed" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


def test_a_fault_while_updating_fails_that_steps_requests_and_the_engine_goes_on(model_dir):
    engine = _engine(model_dir, max_num_seqs=1)
    first = engine.submit([5, 6, 7], SamplingParams(max_tokens=4), request_id=POISON)
    second = engine.submit([5, 6, 8], SamplingParams(max_tokens=4))
    original = first.append_token
    first.append_token = lambda token, now: (_ for _ in ()).throw(OSError("injected fault in update"))
    _run(engine)
    assert first.finish_reason == FinishReason.ERROR and "update" in first.error
    assert second.finish_reason == FinishReason.LENGTH and len(second.output_token_ids) == 4
    assert engine.step_errors["update"] == 1
    _assert_no_leak(engine)
    first.append_token = original


def test_a_schedule_fault_with_no_request_to_blame_fails_the_requests_it_held(model_dir):
    engine = _engine(model_dir)
    healthy, poisoned = _submit_mix(engine)
    calls = {"n": 0}
    original = engine.scheduler.schedule

    def broken_once():
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("injected fault outside any request")
        return original()
    engine.scheduler.schedule = broken_once
    _run(engine)
    assert all(r.finish_reason == FinishReason.ERROR and "schedule" in r.error for r in [*healthy, poisoned])
    _assert_no_leak(engine)
    _assert_still_serves(engine)


def test_a_nan_logit_row_fails_that_request_only(model_dir):
    """A NaN in one token's embedding: only sequences holding that token get non-finite logits."""
    engine = _engine(model_dir)
    model = engine.residency.get(engine.model_names[0])
    with torch.no_grad():
        model.embed.weight[200] = math.nan
    healthy = [engine.submit([3, 4, 5 + i] * 5, SamplingParams(max_tokens=5, temperature=t))
               for i, t in enumerate((0.0, 0.7, 1.3))]
    bad = engine.submit([200, 3, 4], SamplingParams(max_tokens=5, temperature=0.8))
    _run(engine)
    assert bad.finish_reason == FinishReason.ERROR and bad.error == NON_FINITE_LOGITS
    assert all(r.finish_reason == FinishReason.LENGTH and len(r.output_token_ids) == 5 for r in healthy)
    assert engine.step_errors["sample"] == 1
    _assert_no_leak(engine)


def test_a_vanishing_temperature_is_greedy_not_nan(model_dir):
    """What schemathesis found: a temperature that turned the logits into NaN and killed the engine."""
    engine = _engine(model_dir)
    tiny = engine.submit([9, 8, 7, 6], SamplingParams(max_tokens=8, temperature=5e-324, seed=1))
    greedy = engine.submit([9, 8, 7, 6], SamplingParams(max_tokens=8))
    _run(engine)
    assert tiny.finish_reason == FinishReason.LENGTH
    assert tiny.output_token_ids == greedy.output_token_ids


@pytest.mark.parametrize("seed", [2**64 - 1, -2**63, 10**19])
def test_extreme_seeds_sample(model_dir, seed):
    engine = _engine(model_dir)
    a = engine.submit([1, 2, 3], SamplingParams(max_tokens=5, temperature=1.0, seed=seed))
    b = engine.submit([1, 2, 3], SamplingParams(max_tokens=5, temperature=1.0, seed=seed))
    _run(engine)
    assert a.finish_reason == b.finish_reason == FinishReason.LENGTH
    assert a.output_token_ids == b.output_token_ids      # seeded: the same draw


@pytest.mark.parametrize("params", [dict(seed=10**20), dict(seed=-2**63 - 1), dict(temperature=math.nan),
                                    dict(temperature=math.inf), dict(temperature=-1.0), dict(max_tokens=0),
                                    dict(max_tokens=True)])
def test_impossible_sampling_params_are_refused_before_queueing(params):
    with pytest.raises(ValueError):
        SamplingParams(**params)


def test_a_model_file_missing_or_corrupt_fails_its_requests_only(model_dir, tmp_path):
    engine = _engine(str(tmp_path), models=3, num_preload_models=1)
    engine.residency.paths["model-1"].unlink()
    engine.residency.paths["model-2"].write_bytes(b"not a weight file")
    engine.start()
    try:
        missing = engine.submit([1, 2, 3], SamplingParams(max_tokens=3), model="model-1")
        corrupt = engine.submit([1, 2, 3], SamplingParams(max_tokens=3), model="model-2")
        fine = engine.submit([1, 2, 3], SamplingParams(max_tokens=3), model="model-0")
        for r in (missing, corrupt, fine):
            assert r.wait(30)
    finally:
        engine.stop()
    assert missing.finish_reason == corrupt.finish_reason == FinishReason.ERROR
    assert "model-1 could not be loaded" in missing.error and "model-2 could not be loaded" in corrupt.error
    assert fine.finish_reason == FinishReason.LENGTH
    _assert_no_leak(engine)


def test_a_hook_that_raises_is_counted_and_serving_goes_on(model_dir):
    engine = _engine(model_dir)
    recorder = instrument(engine)
    recorder.on_forward = lambda inputs: 1 / 0
    healthy, poisoned = _submit_mix(engine)
    try:
        _run(engine)
    finally:
        uninstrument(engine)     # the attention patch is process-wide
    assert all(r.finish_reason == FinishReason.LENGTH for r in [*healthy, poisoned])
    assert recorder.guard.errors["forward"] > 0
    assert sum(engine.step_errors.values()) == 0
    _assert_no_leak(engine)


def test_abort_frees_the_requests_blocks_at_the_next_step(model_dir):
    engine = _engine(model_dir)
    engine.start()
    try:
        long = engine.submit([1, 2, 3] * 10, SamplingParams(max_tokens=200))
        other = engine.submit([4, 5, 6], SamplingParams(max_tokens=3))
        stream = long.stream(timeout=30)
        next(stream)
        engine.abort(long.request_id)
        assert long.wait(10) and other.wait(10)
    finally:
        engine.stop()
    assert long.finish_reason == FinishReason.ABORT and len(long.output_token_ids) < 200
    assert other.finish_reason == FinishReason.LENGTH
    assert engine.finish_reasons[FinishReason.ABORT] == 1
    _assert_no_leak(engine)


def test_a_request_past_its_deadline_fails_with_timeout(model_dir):
    engine = _engine(model_dir, max_num_seqs=1)
    engine.start()
    try:
        ahead = engine.submit([1, 2, 3], SamplingParams(max_tokens=200))
        stuck = engine.submit([4, 5, 6], SamplingParams(max_tokens=3), timeout_s=0.05)
        assert stuck.wait(10)
        engine.abort(ahead.request_id)
        assert ahead.wait(10)
    finally:
        engine.stop()
    assert stuck.finish_reason == FinishReason.TIMEOUT and "deadline" in stuck.error
    assert not stuck.output_token_ids
    _assert_no_leak(engine)


def test_stop_lets_requests_finish_within_grace_then_aborts_the_rest(model_dir):
    engine = _engine(model_dir)
    engine.start()
    short = [engine.submit([1, 2, 3], SamplingParams(max_tokens=2)) for _ in range(3)]
    engine.stop(grace_s=30)
    assert all(r.finish_reason == FinishReason.LENGTH for r in short)
    with pytest.raises(EngineStopped, match="stopping"):
        engine.submit([1], SamplingParams(max_tokens=1))

    engine = _engine(model_dir)
    engine.start()
    endless = engine.submit([1, 2, 3], SamplingParams(max_tokens=250))
    next(endless.stream(timeout=30))
    engine.stop(grace_s=0)
    assert endless.finished and endless.finish_reason == FinishReason.ABORT and "stopped" in endless.error
    _assert_no_leak(engine)


def test_if_the_loop_dies_every_request_fails_at_once_and_submit_refuses(model_dir, caplog):
    engine = _engine(model_dir)
    engine.start()
    try:
        running = engine.submit([1, 2, 3], SamplingParams(max_tokens=250))
        next(running.stream(timeout=30))

        def broken():
            raise MemoryError("injected: the loop itself breaks")
        engine.scheduler.has_work = broken
        engine.abort("nobody")              # wake the loop
        assert running.wait(10)
        deadline = time.monotonic() + 10
        while engine.failure is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert running.finish_reason == FinishReason.ERROR and "MemoryError" in running.error
        assert engine.failure.startswith("MemoryError") and not engine.serving
        with pytest.raises(EngineStopped, match="down: MemoryError"):
            engine.submit([1], SamplingParams(max_tokens=1))
        assert any("loop died" in r.getMessage() for r in caplog.records)
    finally:
        engine.stop()
