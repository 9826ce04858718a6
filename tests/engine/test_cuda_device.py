"""What only a CUDA device can check (skipped elsewhere; bench/device_check.sh runs them on a GPU): both KV
allocators serve on the device and give every block back, and the hooks time attention with CUDA events.
The paged attention against its float64 reference on CUDA is in test_engine_attention.py."""

import pytest
import torch

from stagelens.engine_hooks import RecorderConfig, instrument, uninstrument
from stagelens.engine_hooks.engine import EngineConfig, LLMEngine, SamplingParams

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _engine(model_dir, **overrides) -> LLMEngine:
    cfg = dict(model="tiny", model_dir=model_dir, max_model_len=256, kv_cache_memory="4MiB",
               max_num_batched_tokens=256, max_num_seqs=8, device="cuda")
    return LLMEngine(EngineConfig(**{**cfg, **overrides}))


def _submit_batch(engine, n: int = 6, max_tokens: int = 8) -> list:
    return [engine.submit(list(range(1, 20 + 7 * i)), SamplingParams(max_tokens=max_tokens)) for i in range(n)]


@pytest.mark.parametrize("allocator", ["paged", "contiguous"])
def test_both_allocators_serve_on_cuda_and_return_every_block(model_dir, allocator):
    engine = _engine(model_dir, allocator=allocator)
    assert engine.device.type == "cuda" and all(k.is_cuda and v.is_cuda for k, v in engine.kv_cache.pools)
    reqs = _submit_batch(engine)
    engine.run_until_idle(timeout=120)
    assert all(r.finish_reason == "length" and len(r.output_token_ids) == 8 for r in reqs)
    assert engine.allocator.usage().used_blocks == 0


def test_hooks_time_attention_with_cuda_events(model_dir):
    engine = _engine(model_dir)
    rec = instrument(engine, RecorderConfig(usage_interval_s=0.0))
    try:
        events = []
        original = rec.on_attention_events
        rec.on_attention_events = lambda start, end: (events.append((start, end)), original(start, end))
        reqs = _submit_batch(engine)
        engine.run_until_idle(timeout=120)
        assert all(r.finish_reason == "length" for r in reqs)
        assert events and all(isinstance(s, torch.cuda.Event) for s, _ in events)
        busy = [s for s in rec.recent_steps() if s["tokens"]]
        assert busy and all(s["attention_s"] > 0 for s in busy)
        assert all(s["attention_s"] < s["end"] - s["start"] for s in busy)   # inside its step
        assert rec.counters["attention_seconds_total"] > 0
    finally:
        uninstrument(engine)
