"""The step cost of an engine read from outside, fitted on its spans alone: spans made by a simulated engine of
known step cost (each request's arrival, prefill interval, first token and end, as vLLM's `llm_request` spans
give them) fit a cost that replays that workload close to the truth."""

import dataclasses
import random

import pytest

from stagelens.engine_hooks.records.timeline import PrefillChunk, RequestTimeline
from stagelens.whatif.fit import StepCost
from stagelens.whatif.predict import predict
from stagelens.whatif.settings import Settings
from stagelens.whatif.spans import fit_spans, pseudo_steps
from stagelens.whatif.workload import ServedRequest

SETTINGS = Settings(block_size=16, max_num_seqs=8, max_num_batched_tokens=2048, enable_chunked_prefill=False,
                    long_prefill_token_threshold=0, policy="fcfs", allocator="paged", max_model_len=2048,
                    kv_cache_memory=128 * 2**20, kv_bytes_per_token=8192, models=1, num_preload_models=1,
                    max_resident_models=None)
TRUE = StepCost({"fixed": 0.01, "prefill_tokens": 4e-4, "cold_prefill_tokens": 0.0, "prefill_pairs": 2e-7,
                 "decode_seqs": 2e-3, "kv_tokens": 1e-6, "extra_forwards": 0.0, "loading": 0.0}, steps=1,
                error_median=0, error_p90=0, total_error=0,
                observed_max={"prefill_tokens": 1e9, "prefill_pairs": 1e12, "decode_seqs": 1e9, "kv_tokens": 1e12})


def workload(seed=5, count=150, rate=3.0):
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(count):
        t += rng.expovariate(rate)
        prompt = 1500 if i % 10 == 3 else rng.randint(20, 200)
        out.append(ServedRequest(f"r{i}", "model-0", t, prompt, rng.randint(8, 40)))
    return out


def spans_of(requests):
    """What the engine's llm_request spans would say of each simulated request."""
    run = predict(SETTINGS, TRUE, requests).simulation
    return [RequestTimeline(r.rid, r.model, r.prompt, r.outputs, r.arrival, r.finished, first_token=r.first_token,
                            chunks=[PrefillChunk(r.scheduled, r.first_token, 0, 0)]) for r in run.requests]


def test_each_request_gives_a_prefill_and_a_decode_pseudo_step():
    spans = spans_of(workload(count=20))
    steps = pseudo_steps(spans)
    assert len(steps) == 2 * len(spans)          # every request here has two outputs or more
    prefill = steps[0]
    assert prefill["prefill_tokens"] == spans[0].prompt_tokens
    assert prefill["prefill_pairs"] == spans[0].prompt_tokens ** 2


def test_a_cost_fitted_on_spans_replays_the_workload_close_to_the_truth():
    requests = workload()
    cost = fit_spans(spans_of(requests))
    truth = predict(SETTINGS, TRUE, requests).figures
    from_spans = predict(SETTINGS, cost, requests).figures
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s"):
        assert from_spans[key] == pytest.approx(truth[key], rel=0.25), key


def _span(rid, model, prompt, output, prefill_start, first_token, finished):
    return RequestTimeline(rid, model, prompt, output, prefill_start, finished, first_token=first_token,
                           chunks=[PrefillChunk(prefill_start, first_token, 0, 0)])


def test_spans_price_the_kv_in_the_tokens_the_sequences_hold():
    # alone: a prompt of 20 tokens holds them once prefilled; over its 4 decode steps it holds on average its
    # prompt and half its output
    (prefill, decode) = pseudo_steps([_span("a", "model-0", 20, 5, 0.0, 1.0, 2.0)])
    assert prefill["kv_tokens_cached"] == 20
    assert decode["kv_tokens_cached"] == pytest.approx(20 + 2.5)


def test_a_pseudo_step_serving_two_models_runs_a_forward_pass_for_each():
    spans = [_span("a", "model-0", 40, 30, 0.0, 0.5, 4.0),     # decoding from 0.5 s to 4 s
             _span("b", "model-1", 40, 30, 1.0, 1.5, 2.25),    # prefilled beside it, decoding for half its time
             _span("c", "model-0", 40, 30, 5.0, 5.5, 6.0)]     # alone
    steps = pseudo_steps(spans)
    a_decode, b_prefill, b_decode, c_prefill, c_decode = steps[1], steps[2], steps[3], steps[4], steps[5]
    assert b_prefill["forwards"] == 2                     # model-1's prompt beside model-0's decode
    assert b_decode["forwards"] == 2                      # model-0 decoded beside it all along
    assert a_decode["forwards"] == pytest.approx(1 + 0.75 / 3.5)    # model-1 beside it for 0.75 s of 3.5
    assert c_prefill["forwards"] == c_decode["forwards"] == 1


def test_a_prompt_chunked_by_the_budget_is_its_mean_chunk():
    """1,024 tokens under a budget of 128: eight steps, each one eighth of the interval and of the tokens, its
    pairs over the prompt prefilled so far, not one step of the whole prompt."""
    spans = [RequestTimeline("long", "model-0", 1024, 4, 0.0, 0.2, first_token=0.08,
                             chunks=[PrefillChunk(0.0, 0.08, 0, 0)])]
    whole, = [s for s in pseudo_steps(spans) if s["prefill_tokens"]]
    chunked, = [s for s in pseudo_steps(spans, chunk=128) if s["prefill_tokens"]]
    assert whole["prefill_tokens"] == 1024 and whole["end"] - whole["start"] == pytest.approx(0.08)
    assert chunked["prefill_tokens"] == 128 and chunked["end"] - chunked["start"] == pytest.approx(0.01)
    assert chunked["prefill_pairs"] == sum(128 * 128 * (k + 1) for k in range(8)) / 8


def test_the_output_lags_seen_are_replayed_on_each_request():
    """Tokens reach vLLM's spans a step after the step that made them, now and then much later: the lags seen
    land on the predicted first tokens, the rare long one in the tail and not in the median."""
    requests = workload(count=100, rate=1.0)
    spans = spans_of(requests)
    for i, t in enumerate(spans):       # a lag of 4 ms, one request in twenty 30 ms
        lag = 0.03 if i % 20 == 7 else 0.004
        t.first_token += lag
        t.finished += lag
    cost = fit_spans(spans)
    assert sorted(cost.output_lags_s)[len(cost.output_lags_s) // 2] == pytest.approx(0.004)
    plain = predict(SETTINGS, TRUE, requests).figures
    lagged = predict(SETTINGS, dataclasses.replace(TRUE, output_lags_s=cost.output_lags_s), requests).figures
    assert lagged["ttft_p50_s"] - plain["ttft_p50_s"] == pytest.approx(0.004, abs=0.002)
    assert lagged["ttft_p99_s"] - plain["ttft_p99_s"] > 0.015
