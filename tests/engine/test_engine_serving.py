"""The engine end to end on the tiny model: scheduling invariants, identical greedy outputs
whatever the batching, chunking or preemption, and models loaded from their files."""

import random

import pytest
import torch

from stagelens.engine_hooks.engine import ConfigError, EngineConfig, LLMEngine, SamplingParams
from stagelens.engine_hooks.engine.weights import ensure_weights_file, load_model


def _engine(model_dir, **overrides) -> LLMEngine:
    cfg = dict(model="tiny", model_dir=model_dir, max_model_len=256, kv_cache_memory="4MiB",
               max_num_batched_tokens=64, max_num_seqs=8, device="cpu")
    cfg.update(overrides)
    return LLMEngine(EngineConfig(**cfg))


def _prompts(n, seed=0, lo=5, hi=120):
    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def _generate(engine, prompts, max_tokens=12, check=None):
    reqs = [engine.submit(p, SamplingParams(max_tokens=max_tokens)) for p in prompts]
    engine._drain_inbox()
    while engine.scheduler.has_work():
        stats = engine.step()
        if check:
            check(engine, stats)
    return reqs


def test_budget_and_max_num_seqs_never_exceeded_and_all_finish(model_dir):
    engine = _engine(model_dir, max_num_seqs=3)

    def check(eng, stats):
        assert stats.num_scheduled_tokens <= eng.config.max_num_batched_tokens
        assert stats.num_running <= 3

    reqs = _generate(engine, _prompts(10), check=check)
    assert all(r.finished and len(r.output_token_ids) == 12 for r in reqs)
    assert engine.allocator.usage().used_blocks == 0


def test_fcfs_admits_in_arrival_order(model_dir):
    engine = _engine(model_dir, max_num_seqs=2)
    reqs = _generate(engine, _prompts(8, seed=3))
    first_scheduled = sorted(reqs, key=lambda r: r.first_event_time("scheduled"))
    assert [r.request_id for r in first_scheduled] == [r.request_id for r in reqs]


def test_greedy_outputs_identical_with_and_without_chunked_prefill(model_dir):
    prompts = _prompts(6, seed=1, lo=30, hi=200)
    chunked = _generate(_engine(model_dir, enable_chunked_prefill=True, max_num_batched_tokens=32), prompts)
    whole = _generate(_engine(model_dir, enable_chunked_prefill=False, max_num_batched_tokens=256), prompts)
    one_by_one = _generate(_engine(model_dir, max_num_seqs=1, max_num_batched_tokens=256), prompts)
    for a, b, c in zip(chunked, whole, one_by_one, strict=True):
        assert a.output_token_ids == b.output_token_ids == c.output_token_ids


def test_greedy_outputs_identical_under_forced_preemption(model_dir):
    prompts = _prompts(6, seed=2, lo=30, hi=60)
    roomy = _engine(model_dir)
    tight = _engine(model_dir, kv_cache_memory=8192 * 17)   # 17 blocks of 16 tokens for 6 requests
    expected = _generate(roomy, prompts, max_tokens=40)
    got = _generate(tight, prompts, max_tokens=40)
    assert tight.totals.preemptions > 0
    assert roomy.totals.preemptions == 0
    for a, b in zip(expected, got, strict=True):
        assert a.output_token_ids == b.output_token_ids
    victims = [r for r in got if r.num_preemptions]
    assert victims and all(r.first_event_time("preempted") for r in victims)
    assert all(any(e == "resumed" for _, e in r.events) for r in victims)


def test_contiguous_allocator_gives_same_outputs(model_dir):
    prompts = _prompts(4, seed=4)
    paged = _generate(_engine(model_dir), prompts)
    contiguous = _generate(_engine(model_dir, allocator="contiguous"), prompts)
    assert [r.output_token_ids for r in paged] == [r.output_token_ids for r in contiguous]


@pytest.mark.parametrize("policy", ["short-first", "length-bucket"])
def test_policies_finish_everything_with_same_outputs(model_dir, policy):
    prompts = _prompts(8, seed=5)
    base = _generate(_engine(model_dir), prompts)
    other = _generate(_engine(model_dir, policy=policy, max_num_seqs=2), prompts)
    assert [r.output_token_ids for r in base] == [r.output_token_ids for r in other]


def test_short_first_admits_short_prompts_first(model_dir):
    engine = _engine(model_dir, policy="short-first", max_num_seqs=1)
    prompts = [[1] * 100, [2] * 90, [3] * 10, [4] * 50]
    reqs = _generate(engine, prompts, max_tokens=2)
    order = sorted(reqs[1:], key=lambda r: r.first_event_time("scheduled"))
    assert [r.num_prompt_tokens for r in order] == [10, 50, 90]


def test_temperature_sampling_is_reproducible_and_differs_from_greedy(model_dir):
    prompts = _prompts(3, seed=6)
    params = SamplingParams(max_tokens=16, temperature=1.0, seed=7)
    runs = []
    for batch in (64, 16):
        engine = _engine(model_dir, max_num_batched_tokens=batch)
        reqs = [engine.submit(p, params) for p in prompts]
        engine.run_until_idle()
        runs.append([r.output_token_ids for r in reqs])
    assert runs[0] == runs[1]
    greedy = [r.output_token_ids for r in _generate(_engine(model_dir), prompts, max_tokens=16)]
    assert runs[0] != greedy


def test_model_loaded_from_file_gives_outputs_of_saved_model(model_dir, tmp_path):
    engine = _engine(model_dir)
    path = engine.residency.paths["model-0"]
    loaded, size = load_model(path, engine.config.preset, torch.device("cpu"), torch.float32, cold=True)
    assert size == path.stat().st_size > 0
    saved = engine.residency.get("model-0")
    for (name, a), (_, b) in zip(sorted(saved.state_dict().items()), sorted(loaded.state_dict().items()),
                                 strict=True):
        assert torch.equal(a, b), name
    # a different seed gives a different file and different weights
    other = ensure_weights_file(tmp_path, engine.config.preset, seed=99)
    assert other.read_bytes() != path.read_bytes()


def test_cold_model_loads_on_loader_thread_while_resident_model_serves(model_dir):
    engine = _engine(model_dir, models=2, num_preload_models=1)
    assert engine.residency.resident_names() == ["model-0"]
    with engine:
        hot = [engine.submit(p, SamplingParams(max_tokens=8), model="model-0") for p in _prompts(3)]
        cold = engine.submit([5, 6, 7], SamplingParams(max_tokens=8), model="model-1")
        assert cold.wait(60) and all(r.wait(60) for r in hot)
    assert engine.residency.is_resident("model-1")
    assert cold.first_event_time("scheduled") is not None
    assert len(cold.output_token_ids) == 8


def test_streaming_yields_every_token(model_dir):
    with _engine(model_dir) as engine:
        req = engine.submit([1, 2, 3], SamplingParams(max_tokens=10))
        assert list(req.stream(timeout=30)) == req.output_token_ids
        assert req.finish_reason == "length"


@pytest.mark.parametrize("overrides, flag", [
    (dict(block_size=24), "--block-size"),
    (dict(max_num_batched_tokens=8), "--max-num-batched-tokens"),
    (dict(kv_cache_memory="64KiB"), "--kv-cache-memory"),
    (dict(model="huge"), "--model"),
    (dict(enable_chunked_prefill=False, max_num_batched_tokens=128), "--max-num-batched-tokens"),
    (dict(kv_cache_memory="lots"), "--kv-cache-memory"),
])
def test_bad_configuration_names_the_flag(model_dir, overrides, flag):
    with pytest.raises(ConfigError, match=flag):
        _engine(model_dir, **overrides)


def test_bad_requests_are_refused(model_dir):
    engine = _engine(model_dir)
    with pytest.raises(ValueError, match="max-model-len"):
        engine.submit([1] * 256)
    with pytest.raises(ValueError, match="unknown model"):
        engine.submit([1], model="nope")
    with pytest.raises(ValueError, match="token ids"):
        engine.submit([1000])
