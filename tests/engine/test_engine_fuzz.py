"""Random request mixes against the real engine (tiny model, driven synchronously): whatever is submitted,
aborted or timed out, every accepted request ends with a known reason, impossible ones are refused at
`submit`, no KV block leaks, and the engine never records a step error.

Derandomized in `make test`; `make fuzz` (STAGELENS_FUZZ_EXAMPLES) runs fresh cases by the thousand."""

import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stagelens.engine_hooks.engine import EngineConfig, FinishReason, LLMEngine, SamplingParams
from stagelens.engine_hooks.engine.engine import FINISH_REASONS

FUZZ_EXAMPLES = int(os.environ.get("STAGELENS_FUZZ_EXAMPLES", "0"))
MAX_MODEL_LEN = 128

temperatures = st.one_of(st.just(0.0), st.floats(min_value=0, max_value=10), st.sampled_from([5e-324, 1e-6, 1e-5]),
                         st.sampled_from([math.nan, math.inf, -1.0]))
seeds = st.one_of(st.none(), st.integers(min_value=-2**70, max_value=2**70))
submits = st.tuples(st.just("submit"), st.lists(st.integers(min_value=-2, max_value=300), max_size=140),
                    st.integers(min_value=-1, max_value=40), temperatures, seeds, st.integers(min_value=0, max_value=2))
aborts = st.tuples(st.just("abort"), st.integers(min_value=0, max_value=30))
steps = st.tuples(st.just("step"), st.integers(min_value=1, max_value=5))


@pytest.fixture(scope="module")
def engine(model_dir):
    return LLMEngine(EngineConfig(model="tiny", model_dir=model_dir, max_model_len=MAX_MODEL_LEN, models=2,
                                  num_preload_models=1, kv_cache_memory="1MiB", max_num_seqs=6,
                                  max_num_batched_tokens=64, device="cpu"))


@settings(max_examples=FUZZ_EXAMPLES or 30, derandomize=not FUZZ_EXAMPLES, database=None, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(ops=st.lists(st.one_of(submits, aborts, steps), max_size=25))
def test_any_request_mix_ends_cleanly(engine, ops):
    accepted = []
    errors_before = sum(engine.step_errors.values())
    for op in ops:
        if op[0] == "submit":
            _, prompt, max_tokens, temperature, seed, model = op
            try:
                params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed)
                accepted.append(engine.submit(prompt, params, model=f"model-{model}", timeout_s=30))
            except ValueError:
                continue     # refused before queueing: the engine never saw it
        elif op[0] == "abort" and accepted:
            engine.abort(accepted[op[1] % len(accepted)].request_id)
        elif op[0] == "step":
            engine._drain_inbox()
            for _ in range(op[1]):
                engine.step()
    engine.run_until_idle(timeout=120)
    for req in accepted:
        assert req.finished and req.finish_reason in FINISH_REASONS, req
        assert req.finish_reason in (FinishReason.LENGTH, FinishReason.ABORT), (req, req.error)
    assert sum(engine.step_errors.values()) == errors_before
    assert engine.allocator.num_free_blocks() == engine.allocator.num_blocks
