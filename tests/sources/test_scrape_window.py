"""The builders of an outside engine's snapshot (agent/sources/scrape/window.py, scheduler.py), each
run on one window over a real capture (tests/fixtures/real, their origins in SOURCES.md): the
scrape as published, read against the same server when it had done half of it (every counter and
histogram halved, gauges as they are), 10 s before. So a window's deltas are half of what the
capture counts, and each figure is checked against the capture's own lines, as an expert reading
it would."""

from __future__ import annotations

import pytest

from stagelens.sources.kv_events.subscriber import KvEventFigures
from stagelens.sources.scrape.engine_names import generation
from stagelens.sources.scrape.engine_source import names_for
from stagelens.sources.scrape.prometheus_text import parse_exposition
from stagelens.sources.scrape.scheduler import scheduler_figures, window_waits
from stagelens.sources.scrape.window import (
    Scrape,
    ScrapeWindow,
    cold_path,
    counters_and_health,
    engine_info,
    gauges_of,
    kv_capacity,
    kv_figures,
    kv_usage,
    reading,
    scrape_window,
    window_tail,
)
from tests.helpers.real_captures import advanced, capture

SPAN_S = 10.0
V0 = "vllm_v0_idle_qwen25_coder_1_5b.txt"
V1_IDLE = "vllm_v1_0.10_idle_qwen3_4b.txt"
V1_HYBRID = "vllm_v1_0.28_hybrid_idle_qwen38_27b.txt"
SGLANG_03 = "sglang_0.3_idle_gemma2_9b.txt"
SGLANG_04_OVERLOADED = "sglang_0.4_overloaded_llama31_8b.txt"


def window_over(name: str) -> ScrapeWindow:
    """The window over a capture: half of its counts before, the capture SPAN_S later."""
    kind = "sglang" if name.startswith("sglang") else "vllm"
    names = names_for(kind)
    before, now = (_scrape(text, at, names) for text, at in ((advanced(capture(name), -0.5), 0.0),
                                                            (capture(name), SPAN_S)))
    found = generation(now.exposition, kind, name)
    return scrape_window(kind, names, now, before, [now], None,
                         kv_capacity(now.exposition, kind, names, found))


def _scrape(text: str, at: float, names) -> Scrape:
    ex = parse_exposition(text)
    return Scrape(at, ex, gauges_of(ex, names, at))


# --- the KV cache -----------------------------------------------------------------------------
def test_vllm_v1s_cache_is_its_850_blocks_of_16_one_held_back_and_in_use():
    """cache_config_info: num_gpu_blocks 850, block_size 16; usage 0.00117... = 1/850, V1's null
    block."""
    w = window_over(V1_IDLE)
    assert w.capacity is not None
    c = w.capacity
    assert (c.num_blocks, c.tokens, c.reserved_blocks) == (850, 13_600, 1)
    usage = kv_usage(w)
    assert usage is not None and (usage.num_blocks, usage.used_blocks) == (850, 1)
    kv, how = kv_figures(w)
    # the null block alone in use is no fragmentation; one sample is too few for a share of them
    assert kv.fragmentation_ratio is None and kv.full_while_waiting_share is None
    assert "too few for a share" in how["window.kv.full_while_waiting_share"]


def test_a_hybrid_models_cache_holds_the_tokens_it_publishes_not_blocks_times_block_size():
    """vLLM 0.28, attention + mamba: 208 blocks of 784 would be 163,072 tokens; it publishes
    141,994, its block size forced by the model, its size set by --kv-cache-memory-bytes (10
    GiB)."""
    w = window_over(V1_HYBRID)
    assert w.capacity is not None
    assert (w.capacity.num_blocks, w.capacity.block_size, w.capacity.tokens) == (208, 784, 141_994)
    info, _ = engine_info(w, "vLLM V1 (0.11+ names)", "qwen3.8-27b")
    assert info.block_size_forced is True and info.kv_capacity_tokens == 141_994
    assert info.kv_capacity_lever == "--kv-cache-memory-bytes 10737418240"
    kv, how = kv_figures(w)
    assert kv.fragmentation_ratio is None
    assert "the model sets the block size" in how["window.kv.fragmentation_ratio"]


def test_sglang_04s_token_pool_is_the_tokens_in_use_over_their_share():
    """No max_total_num_tokens in 0.4: num_used_tokens 123,859 at token_usage 0.28 is a pool of
    442,354."""
    w = window_over(SGLANG_04_OVERLOADED)
    usage = kv_usage(w)
    assert w.capacity is not None and w.capacity.block_size == 1
    assert usage is not None
    assert (usage.num_blocks, usage.used_blocks) == (round(123_859 / 0.28), 123_859)


def test_the_kv_events_blocks_of_the_window_are_the_kv_figures_blocks():
    w = window_over(V1_IDLE)
    blocks = KvEventFigures(window_s=SPAN_S, batches=3, blocks_stored=40, blocks_removed=25,
                            clears=0, lifetime_mean_s=2.0, lifetime_p50_s=1.5, restored_blocks=4,
                            live_blocks=15, messages=3, malformed=0, malformed_events=0,
                            unknown_events=0, lost_batches=0, sequence_resets=0,
                            unmatched_removals=0, dropped_blocks=0)
    kv, _ = kv_figures(w, blocks)
    assert (kv.blocks_stored, kv.blocks_removed) == (40, 25)
    assert (kv.blocks_restored, kv.block_lifetime_p50_s) == (4, 1.5)
    assert kv_figures(w)[0].blocks_stored is None


# --- the scheduler ----------------------------------------------------------------------------
def test_the_overloaded_sglang_scheduler_queues_2826_requests_for_5_s_at_least():
    """162 running, 2,826 queued; in the window half of 11,228 requests ended (5,614: 561.4 a
    second) and half of 7,557,572 tokens were generated. A queue of 2,826 left at 561.4 a second
    is waited on 5.03 s on average (Little's law): a floor of the P99, the capture having no
    queue-time histogram to say more."""
    w = window_over(SGLANG_04_OVERLOADED)
    waits = window_waits(w)
    s, how = scheduler_figures(w, waits)
    assert (s.running, s.waiting, s.requests_finished) == (162, 2826, 5614)
    assert s.decode_tokens_per_s == pytest.approx(7_557_572 / 2 / SPAN_S)
    assert s.waiting_share == 1.0
    # KV usage 0.28: every second of waiting is in the queue, none for free blocks
    assert s.wait_seconds_by_reason == {"queued": 2826 * SPAN_S, "no_free_blocks": 0.0}
    assert s.decided_wait_p99_s is None and s.decided_wait_p99_at_most_s is None
    assert s.decided_wait_p99_at_least_s == pytest.approx(2826 / (11_228 / 2 / SPAN_S))
    assert "Little's law" in how["window.scheduler.decided_wait_p99_s"]
    assert (s.steps, s.wait_p50_s, s.wait_p99_s, s.busy_ratio) == (None, None, None, None)


def test_vllm_v1s_steps_and_tokens_and_its_wait_bounded_by_the_mean():
    """iteration_tokens_total: 1,739 steps of 1,985 tokens, half of each in the window; 1,739
    generation tokens; 6 requests ended, 3 in the window. Its queue-time P99 sits in the first
    bucket, (0, 0.3] s: only bounded, by 100 times the mean (Markov), never interpolated."""
    w = window_over(V1_IDLE)
    s, how = scheduler_figures(w, window_waits(w))
    assert s.steps == round(1739 / 2) and s.requests_finished == 3
    assert s.tokens_per_s == pytest.approx(1985 / 2 / SPAN_S)
    assert s.decode_tokens_per_s == pytest.approx(1739 / 2 / SPAN_S)
    assert s.step_time_mean_s == pytest.approx(SPAN_S / round(1739 / 2))
    assert (s.running, s.waiting, s.waiting_share) == (0, 0, 0.0)
    assert s.wait_p99_s is None and how["window.scheduler.wait_p99_s"].startswith("< 0.3 s")
    assert s.decided_wait_p99_at_least_s is None and s.decided_wait_p99_at_most_s is not None
    assert s.decided_wait_p99_at_most_s < 0.02
    assert "Markov" in how["window.scheduler.decided_wait_p99_s"]


def test_sglang_03s_queue_time_buckets_place_its_waits():
    """waiting_request_latency_seconds: 2,104 requests, half in the window; the P99 in the (20, 50]
    s bucket."""
    w = window_over(SGLANG_03)
    s, _ = scheduler_figures(w, window_waits(w))
    assert s.requests_finished == 1052
    assert s.wait_p50_s is not None and s.wait_p99_s is not None and 20 < s.wait_p99_s <= 50
    assert (s.decided_wait_p99_at_least_s, s.decided_wait_p99_at_most_s) == (20.0, 50.0)
    assert s.decode_tokens_per_s == pytest.approx(424_549 / 2 / SPAN_S)


# --- the rest of the snapshot -----------------------------------------------------------------
def test_vllm_v1s_counters_and_how_its_requests_finished():
    """request_success_total: 6 `stop`, 0 `length`, 0 `abort`; num_preemptions_total 0."""
    counters, health = counters_and_health(window_over(V1_IDLE))
    assert (counters.requests_finished_total, counters.requests_failed_total) == (6, 0)
    assert counters.preemptions_total == 0
    assert health is not None and health.finish_reasons == {"stop": 6, "length": 0, "abort": 0}


def test_sglang_publishes_no_finish_reasons_so_none_are_counted():
    counters, health = counters_and_health(window_over(SGLANG_04_OVERLOADED))
    assert counters.requests_finished_total is None and health is None


def test_vllm_v1s_engine_info():
    info, how = engine_info(window_over(V1_IDLE), "vLLM V1 (0.10-style names)",
                            "Qwen/Qwen3-4B-Instruct-2507-FP8")
    assert (info.source, info.block_size, info.kv_capacity_tokens) == ("vllm", 16, 13_600)
    assert info.kv_capacity_lever == "--gpu-memory-utilization 0.9"
    assert info.block_size_forced is False
    # no queue ever pinned its batch: max_num_seqs is not inferred
    assert info.max_num_seqs is None and how == {}


def test_vllm_v0_serving_no_adapter_has_no_request_waiting_on_a_model():
    """lora_requests_info{max_lora="0"}: no adapter is served, so no `deferred` wait is a model
    load."""
    w = window_over(V0)
    assert w.now.gauges.adapters is False and cold_path(w).waiting_on_model is None
    # V0 holds no null block back
    assert w.capacity is not None and w.capacity.reserved_blocks == 0


def test_the_reading_says_the_ttft_past_the_last_bucket_and_makes_none_up():
    """8,495 of 11,008 TTFTs past 30 s, SGLang 0.4's last bucket: its P50 and P99 are only `>= 30
    s`."""
    r = reading(window_over(SGLANG_04_OVERLOADED))
    assert (r.ttft_p50_s, r.ttft_p99_s) == (None, None)
    assert r.said is not None and r.said["ttft_p50"] == r.said["ttft_p99"] == ">= 30 s"
    assert r.kv_usage_ratio == 0.28 and r.kv_capacity_tokens == round(123_859 / 0.28)


def test_no_spans_no_tail():
    assert window_tail(window_over(V1_IDLE), None, []) == (None, {})
