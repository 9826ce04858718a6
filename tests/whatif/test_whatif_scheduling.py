"""The simulator holds to the real engine's decisions: the same requests, admitted in the same order, chunked
the same way, preempted at the same steps, step by step, on the bundled engine run on CPU with the tiny model;
with the same KV slots reserved for the requests still running after each step (whole blocks, as its allocator
gives them), and each step priced on the KV tokens those requests hold (what the step cost is fitted on).

Every request is submitted before the first step, so the real engine's decisions do not depend on timing;
the simulator gets them all at one instant with a constant step cost."""

import random

import pytest

from stagelens.engine_hooks.engine import EngineConfig, LLMEngine, SamplingParams
from stagelens.whatif.settings import Settings
from stagelens.whatif.simulator import SimRequest, Simulator

TINY_KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 4     # layers x K,V x kv heads x head dim x float32


class Decisions:
    """An engine observer keeping each step's batch: (request, tokens), the requests preempted, and the KV slots
    reserved by the requests running after it and the tokens they hold."""

    def __init__(self) -> None:
        self.steps: list[dict] = []

    def on_step(self, _engine, stats, batch) -> None:
        self.steps.append({"entries": [(r.request_id, n) for r, n in batch.entries],
                           "preempted": [r.request_id for r in batch.preempted], "kv_slots": stats.kv_slots_reserved,
                           "kv_tokens": stats.kv_tokens_cached})


def workload(seed: int, count: int) -> list[tuple[str, int, int]]:
    rng = random.Random(seed)
    return [(f"r{i}", rng.choice([4, 9, 17, 30, 45]), rng.randint(2, 12)) for i in range(count)]


def real_decisions(cfg: EngineConfig, requests) -> list[dict]:
    engine = LLMEngine(cfg)
    seen = Decisions()
    engine.add_observer(seen)
    try:
        for rid, prompt, out in requests:
            engine.submit(list(range(1, prompt + 1)), SamplingParams(max_tokens=out), request_id=rid)
        engine.run_until_idle(timeout=120)
    finally:
        engine.stop()
    assert engine.finish_reasons["length"] == len(requests)
    return [s for s in seen.steps if s["entries"] or s["preempted"]]


def simulated_decisions(cfg: EngineConfig, requests) -> list[dict]:
    settings = Settings(block_size=cfg.block_size, max_num_seqs=cfg.max_num_seqs,
                        max_num_batched_tokens=cfg.max_num_batched_tokens,
                        enable_chunked_prefill=cfg.enable_chunked_prefill,
                        long_prefill_token_threshold=cfg.long_prefill_token_threshold, policy=cfg.policy,
                        allocator=cfg.allocator, max_model_len=cfg.max_model_len, kv_cache_memory=cfg.kv_cache_memory,
                        kv_bytes_per_token=TINY_KV_BYTES_PER_TOKEN, models=1, num_preload_models=1,
                        max_resident_models=None, model="tiny")
    assert settings.num_blocks == cfg.num_blocks()
    sim = Simulator(settings, lambda *_: (0.001, False), lambda *_: 1.0)
    sim.trace = []
    result = sim.run([SimRequest(rid, "model-0", 0.0, prompt, out) for rid, prompt, out in requests])
    assert all(r.finished is not None for r in result.requests)
    return sim.trace


CASES = {
    # a KV cache of 12 blocks of 8 tokens for up to 4 requests of up to 57 tokens: preemption by recompute
    "fcfs, chunked, preempting": dict(max_num_seqs=4, max_num_batched_tokens=32, kv_blocks=12),
    "long-prefill threshold": dict(max_num_seqs=4, max_num_batched_tokens=48, long_prefill_token_threshold=16,
                                   kv_blocks=16),
    "short-first": dict(policy="short-first", max_num_seqs=3, max_num_batched_tokens=40, kv_blocks=12),
    "length-bucket": dict(policy="length-bucket", max_num_seqs=3, max_num_batched_tokens=40, kv_blocks=14),
    "no chunked prefill": dict(enable_chunked_prefill=False, max_num_seqs=4, max_num_batched_tokens=64,
                               kv_blocks=12),
    "contiguous": dict(allocator="contiguous", max_num_seqs=4, max_num_batched_tokens=32, kv_blocks=24),
}


@pytest.mark.parametrize("case", list(CASES))
def test_simulator_takes_the_engines_decisions_step_by_step(case, model_dir):
    settings = dict(CASES[case])
    blocks = settings.pop("kv_blocks")
    cfg = EngineConfig(model="tiny", block_size=8, max_model_len=64, device="cpu", dtype="float32",
                       kv_cache_memory=blocks * 8 * TINY_KV_BYTES_PER_TOKEN, model_dir=model_dir, **settings)
    requests = workload(seed=len(case), count=10)
    real = real_decisions(cfg, requests)
    simulated = simulated_decisions(cfg, requests)
    for i, (r, s) in enumerate(zip(real, simulated, strict=False)):
        assert s == r, f"step {i}: the engine did {r}, the simulator {s}"
    assert len(simulated) == len(real)
    if case.startswith("fcfs"):
        assert any(s["preempted"] for s in real)          # the case exercises preemption
    if "threshold" in case:
        assert any(n == 16 for s in real for _, n in s["entries"])   # ... and the threshold's chunks
