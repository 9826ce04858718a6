"""Real /metrics captures (tests/fixtures/real, their origins in SOURCES.md) read as an operator would meet
them: served over real HTTP with their counters advancing as a real server's do, sampled by the agent's own
sampler, diagnosed, and the verdict compared with the one an expert gives from the same capture."""

import time

import pytest

from stagelens.sources.scrape.engine_source import VllmSource
from tests.helpers.real_captures import Serving, capture, judged


@pytest.fixture
def serve():
    served = []

    def start(text: str, per_s: float = 0.0) -> Serving:
        served.append(Serving(text, per_s))
        return served[-1]

    yield start
    for s in served:
        s.server.close()


def states(result) -> dict[str, str]:
    return {s.stage: s.state for s in result.stages}


# --- idle servers: ok, with every stage judged ---------------------------------------------------------------
@pytest.mark.parametrize("name, kind, said", [
    ("vllm_v0_idle_qwen25_coder_1_5b.txt", "vllm", "vLLM V0"),
    ("vllm_v1_0.10_idle_qwen3_4b.txt", "vllm", "vLLM V1 (0.10-style names)"),
    ("vllm_v1_0.28_hybrid_idle_qwen38_27b.txt", "vllm", "vLLM V1 (0.11+ names)"),
    ("sglang_0.3_idle_gemma2_9b.txt", "sglang", "SGLang 0.3"),
])
def test_an_idle_server_reads_ok_with_every_stage_judged(serve, name, kind, said):
    result, frame = judged(serve(capture(name)), kind)
    assert result.verdict == "ok" and result.root_stage is None, (states(result), result.unavailable)
    assert set(states(result).values()) == {"ok"}
    assert result.engine.startswith(said) and frame.engine.engine.generation == result.engine
    assert result.exit_code == 0


def test_idle_vllm_v1_reserved_block_is_not_fragmentation(serve):
    """V1 0.10 at idle reports 1/850 of its blocks in use: the null block it keeps for itself, not 16 slots
    holding no token (which read as fragmentation 1.00, FIRING)."""
    result, frame = judged(serve(capture("vllm_v1_0.10_idle_qwen3_4b.txt")), "vllm")
    assert frame.engine.usage.num_blocks == 850 and frame.engine.usage.used_blocks == 1
    frag = next(e for e in result.stage("kv_cache").evidence if e.signal == "kv_fragmentation_ratio")
    assert frag.state == "ok" and frag.value is None and frag.provenance == "inferred"


def test_vllm_v0_max_lora_zero_is_no_adapter(serve):
    """lora_requests_info{max_lora="0"}: this server serves no adapter, so `deferred` waits are no model loads."""
    result, frame = judged(serve(capture("vllm_v0_idle_qwen25_coder_1_5b.txt")), "vllm")
    on_model = next(e for e in result.stage("cold_path").evidence if e.signal == "requests_waiting_on_model")
    assert on_model.state == "unknown" and on_model.provenance == "not observable"
    assert frame.engine.window.cold_path.waiting_on_model is None


def test_a_hybrid_model_capacity_comes_from_kv_cache_size_tokens(serve):
    """Qwen3.8-27B: 208 blocks of 784 tokens would be 163,072 slots; the engine says 141,994 tokens, and its
    block size is the model's: no fragmentation judged, no block-size advice."""
    result, frame = judged(serve(capture("vllm_v1_0.28_hybrid_idle_qwen38_27b.txt")), "vllm")
    info = frame.engine.engine
    assert info.kv_capacity_tokens == 141994 and info.block_size == 784 and info.block_size_forced is True
    assert "the model sets the block size" in frame.engine.inferred["window.kv.fragmentation_ratio"]
    assert not any("--block-size" in r.text for s in result.stages for r in s.recommendations)


# --- an overloaded server: the stage that holds the queue --------------------------------------------------
def test_overloaded_sglang_04_fires_scheduler_with_the_kv_cache_free(serve):
    """2,826 queued, 162 running, token usage 0.28, most TTFTs past 30 s: the queue is the scheduler's (the KV
    cache has room), never "ok"."""
    served = serve(capture("sglang_0.4_overloaded_llama31_8b.txt"), per_s=2 / 11228)   # 2 requests a second
    result, frame = judged(served, "sglang")
    assert result.verdict == "firing" and result.root_stage == "scheduler", states(result)
    assert states(result)["kv_cache"] == "ok"
    wait = next(e for e in result.stage("scheduler").evidence if e.signal == "scheduler_wait_p99")
    assert wait.state == "firing" and wait.provenance == "inferred" and "Little's law" in wait.how
    assert wait.value > 60     # 2,826 waiting, 2 a second leave: over 20 minutes each
    assert result.engine == "SGLang 0.4 (num_running_reqs, label model_name)"
    assert result.exit_code == 2


def test_sglang_ttft_past_its_last_bucket_is_said_as_a_bound(serve):
    """Three quarters of the TTFTs are past SGLang's last finite bucket (30 s): the P50 and P99 are "at
    least 30 s", never 30.0 s."""
    served = serve(capture("sglang_0.4_overloaded_llama31_8b.txt"), per_s=2 / 11228)
    source = VllmSource(served.url, kind="sglang")
    source.snapshot(time.monotonic())
    time.sleep(0.01)
    source.snapshot(time.monotonic())
    assert source.reading.ttft_p50_s is None and source.reading.ttft_p99_s is None
    assert source.reading.said["ttft_p50"] == ">= 30 s" and source.reading.said["ttft_p99"] == ">= 30 s"


# --- what cannot be judged says so -----------------------------------------------------------------------
def test_a_scrape_without_the_queue_gauge_is_unknown_with_the_reason(serve):
    """SGLang 0.5.1, as the issue pasted it: the queue gauge was cut off. One request runs; whether others
    wait is not published: unknown, not ok."""
    result, frame = judged(serve(capture("sglang_0.5_busy_qwen32b_excerpt.txt")), "sglang")
    assert result.verdict == "unknown" and result.exit_code == 3, states(result)
    assert result.unavailable.startswith("not judged: ") and "scheduler" in result.unavailable
    assert result.engine.startswith("SGLang 0.4.4+ (num_running_reqs, per-rank labels)")
    assert frame.engine.window.scheduler.running == 1


def test_rank_copies_are_counted_once_and_data_parallel_ranks_added(serve):
    """Two tensor-parallel ranks publish the same scheduler's figures: one request runs, not two. Made here
    from the excerpt: its samples copied as tp_rank 1 (and, below, as a second data-parallel rank)."""
    text = capture("sglang_0.5_busy_qwen32b_excerpt.txt")
    samples = [line for line in text.splitlines() if line.startswith("sglang:")]
    tp_copy = "\n".join(line.replace('tp_rank="0"', 'tp_rank="1"') for line in samples)
    result, frame = judged(serve(text + tp_copy + "\n"), "sglang")
    assert frame.engine.window.scheduler.running == 1
    ranked = "\n".join(line.replace("engine_type=", f'dp_rank="{dp}",engine_type=')
                       for line in samples for dp in (0, 1))
    result, frame = judged(serve(ranked + "\n"), "sglang")
    assert frame.engine.window.scheduler.running == 2 and result.engine.endswith(", 2 data-parallel ranks")


# --- a full KV cache with a queue: the KV cache's doing -----------------------------------------------------
V1_NAME = 'model_name="Qwen/Qwen3-4B-Instruct-2507-FP8"'
V1_MODEL = f'engine="0",{V1_NAME}'


def v1_changed(usage: str, preempted: str, *more: tuple[str, str]) -> str:
    """The V1 0.10 capture with both usage gauges at `usage`, 40 running, 16 waiting, `preempted` preemptions so
    far (the counter then grows with the others) and the changes `more`, each (line, the line it becomes)."""
    text = capture("vllm_v1_0.10_idle_qwen3_4b.txt")
    for old, new in ((f"{{{V1_MODEL}}} 0.0011764705882353343", f"{{{V1_MODEL}}} {usage}"),
                     (f"vllm:num_requests_running{{{V1_MODEL}}} 0.0", f"vllm:num_requests_running{{{V1_MODEL}}} 40.0"),
                     (f"vllm:num_requests_waiting{{{V1_MODEL}}} 0.0", f"vllm:num_requests_waiting{{{V1_MODEL}}} 16.0"),
                     (f"vllm:num_preemptions_total{{{V1_MODEL}}} 0.0",
                      f"vllm:num_preemptions_total{{{V1_MODEL}}} {preempted}"), *more):
        assert old in text, old
        text = text.replace(old, new)
    return text


def full_kv_stand_in() -> str:
    """No full-KV scrape was found published whole (SOURCES.md): the V1 0.10 capture made into the issue's
    stand-in, every change here: both usage gauges at 0.985, 40 running, 16 waiting, 30 preemptions so far."""
    return v1_changed("0.985", "30.0")


def preempting_stand_in() -> str:
    """A window as a real capture showed it (47 preemptions in it, a queue-time P99 of 40 s and more, the KV
    cache under 90% at the scrape), made from the V1 0.10 capture, every change here: usage 0.62, 40 running, 16
    waiting, 470 preemptions so far (4.7 a second as the counters grow 1% a second: 47 in a 10 s window), the 40
    running requests' 8,000 tokens generated so far (so the blocks in use hold them: no fragmentation), and the 6
    queue times past 40 s: none in the buckets up to 40 s, 270 s in all."""
    buckets = [(f'vllm:request_queue_time_seconds_bucket{{engine="0",le="{le}",{V1_NAME}}} 6.0',
                f'vllm:request_queue_time_seconds_bucket{{engine="0",le="{le}",{V1_NAME}}} 0.0')
               for le in ("0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0",
                          "40.0")]
    return v1_changed("0.62", "470.0", *buckets,
                      (f"vllm:request_queue_time_seconds_sum{{{V1_MODEL}}} 0.0003117750002274988",
                       f"vllm:request_queue_time_seconds_sum{{{V1_MODEL}}} 270.0"),
                      (f"vllm:generation_tokens_total{{{V1_MODEL}}} 1739.0",
                       f"vllm:generation_tokens_total{{{V1_MODEL}}} 9739.0"))


def test_a_full_kv_cache_with_a_queue_and_preemptions_is_the_kv_caches(serve):
    """98.5% of the KV cache in use, 16 waiting, preemptions climbing 3 a second: kv_cache is the root, with
    evidence, and nothing the scheduler says claims otherwise."""
    result, frame = judged(serve(full_kv_stand_in(), per_s=0.1), "vllm")
    assert result.verdict == "firing" and result.root_stage == "kv_cache", states(result)
    kv = result.stage("kv_cache")
    full = next(e for e in kv.evidence if e.signal == "kv_full_while_waiting")
    assert full.state == "firing" and full.value == 1.0 and full.provenance == "inferred"
    assert "no data" not in kv.explanation
    assert any("--gpu-memory-utilization" in r.text for r in kv.recommendations)
    # the queue's wait is charged to the KV cache's lack of free blocks, as the KV cache's signal says
    by_reason = frame.engine.window.scheduler.wait_seconds_by_reason
    assert by_reason["no_free_blocks"] > 0 and by_reason["queued"] == 0
    scheduler = result.stage("scheduler")
    assert scheduler.state != "firing" or scheduler.consequence_of == "kv_cache"


def test_preemptions_with_room_at_the_scrape_are_the_kv_caches(serve):
    """vLLM V1 preempts a running request only when it cannot allocate a KV block: 47 preemptions in the window
    say the cache was full then, though each scrape, taken later, finds it 62% in use. The queue's 40 s are the
    KV cache's consequence (before: root scheduler, the KV cache ok)."""
    result, frame = judged(serve(preempting_stand_in(), per_s=0.01), "vllm")
    assert result.verdict == "firing" and result.root_stage == "kv_cache", states(result)
    assert frame.engine.usage.used_blocks == round(0.62 * 850)
    full = next(e for e in result.stage("kv_cache").evidence if e.signal == "kv_full_while_waiting")
    assert full.state == "firing" and "preemption" in full.how
    scheduler = result.stage("scheduler")
    wait = next(e for e in scheduler.evidence if e.signal == "scheduler_wait_p99")
    assert wait.state == "firing" and "at least 40 s" in wait.how
    assert scheduler.state == "firing" and scheduler.consequence_of == "kv_cache"
