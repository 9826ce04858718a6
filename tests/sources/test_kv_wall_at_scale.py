"""The KV wall at GPU scale, over a window of two scrapes minutes apart (issue 45): a pool of 18,198 blocks x 16
tokens, requests of ~2,000 tokens, closed loops at 1.04x, 1.10x and 1.32x what the pool holds, 8, 37 and 47
preemptions in the window and queue times of 15-20 s. vLLM V1 preempts only when it cannot allocate a block, so
any preemption while requests queue says the pool ran out: root kv_cache, whatever the usage at the scrapes, and
the advice names the flag, the value and the sum from the scrape's own numbers.

No such pair was found published whole (tests/fixtures/real/SOURCES.md and gpu/SOURCES.md): each window is made
from the real V1 0.10 capture, every change made here (`at_scale`): its cache_config_info's pool and memory share,
the queue and usage gauges, no prefix-cache hit, and its counters and histograms advanced by the window's requests
and steps."""

import re

import pytest

from tests.helpers.real_captures import capture
from tests.helpers.real_windows import judged_pair

BLOCKS, BLOCK_SIZE = 18198, 16
POOL = BLOCKS * BLOCK_SIZE                 # 291,168 tokens
PROMPT, OUTPUT = 1600, 400                 # tokens a request: 2,000 in all
FINISHED = 240                             # requests finished in the window
GAP_S = 300.0                              # five minutes between the scrapes


def _set(text: str, name: str, value: float, where: str = "") -> str:
    """Every sample of `name` (whose labels hold `where`) at `value`; at least one must be there."""
    pattern = re.compile(rf"^({re.escape(name)}\{{[^}}]*{re.escape(where)}[^}}]*\}}) \S+$", re.M)
    text, found = pattern.subn(lambda m: f"{m.group(1)} {value!r}", text)
    assert found, (name, where)
    return text


def _grow(text: str, name: str, by: float, where: str = "") -> str:
    """Every sample of `name` (whose labels hold `where`) grown by `by`."""
    pattern = re.compile(rf"^({re.escape(name)}\{{[^}}]*{re.escape(where)}[^}}]*\}}) (\S+)$", re.M)
    text, found = pattern.subn(lambda m: f"{m.group(1)} {float(m.group(2)) + by!r}", text)
    assert found, (name, where)
    return text


def at_scale(running: int, waiting: int, preempted: float, finished: int = 0, queued_s: float = 17.5,
             memory_share: str = "0.8") -> str:
    """The V1 0.10 capture as a GPU server's scrape: its pool 18,198 blocks at `memory_share` of device memory,
    `running` and `waiting` now, `preempted` so far, and `finished` requests of PROMPT + OUTPUT tokens each that
    queued `queued_s` (in the (15, 20] s bucket) on top of the capture's 6."""
    text = capture("vllm_v1_0.10_idle_qwen3_4b.txt")
    text = text.replace('num_gpu_blocks="850"', f'num_gpu_blocks="{BLOCKS}"')
    text = text.replace('gpu_memory_utilization="0.9"', f'gpu_memory_utilization="{memory_share}"')
    text = _set(text, "vllm:num_requests_running", float(running))
    text = _set(text, "vllm:num_requests_waiting", float(waiting))
    text = _set(text, "vllm:num_preemptions_total", float(preempted))
    # the blocks the running requests hold (the reserved null block too), each half-way through its output
    usage = min(0.99, (1 + running * (PROMPT + OUTPUT / 2) / BLOCK_SIZE) / BLOCKS)
    text = _set(text, "vllm:kv_cache_usage_perc", usage)
    text = _set(text, "vllm:gpu_cache_usage_perc", usage)
    # no prompt found in the prefix cache: the capture's 80 hits of its 6 requests' 246 would share a third of
    # every prompt here
    text = _set(text, "vllm:prefix_cache_hits_total", 0.0)
    text = _set(text, "vllm:gpu_prefix_cache_hits_total", 0.0)
    done = 6.0 + finished
    for name in ("vllm:request_prompt_tokens_count", "vllm:request_generation_tokens_count",
                 "vllm:e2e_request_latency_seconds_count",
                 "vllm:request_queue_time_seconds_count"):
        text = _set(text, name, done)
    text = _set(text, "vllm:request_success_total", done, 'finished_reason="stop"')
    text = _set(text, "vllm:request_prompt_tokens_sum", 246.0 + finished * PROMPT)
    text = _set(text, "vllm:request_generation_tokens_sum", 1739.0 + finished * OUTPUT)
    # counted at each request's first token: the running ones' prompts too, and half their output
    text = _set(text, "vllm:prompt_tokens_total", 246.0 + (finished + running) * PROMPT)
    text = _set(text, "vllm:generation_tokens_total", 1739.0 + finished * OUTPUT + running * OUTPUT / 2)
    text = _set(text, "vllm:time_to_first_token_seconds_count", done + running)
    # one engine step a request's output token, 64 sequences a step on average
    steps = (finished * OUTPUT + running * OUTPUT / 2) / 64
    text = _grow(text, "vllm:iteration_tokens_total_count", steps)
    text = _grow(text, "vllm:iteration_tokens_total_sum", steps * 64)
    for le in re.findall(r'iteration_tokens_total_bucket\{engine="0",le="([^"]+)"', text):
        if le == "+Inf" or float(le) >= 64:
            text = _grow(text, "vllm:iteration_tokens_total_bucket", steps, f'le="{le}"')
    text = _set(text, "vllm:request_queue_time_seconds_sum", 0.0003117750002274988 + finished * queued_s)
    for le in re.findall(r'request_queue_time_seconds_bucket\{engine="0",le="([^"]+)"', text):
        if le == "+Inf" or float(le) >= queued_s:
            text = _set(text, "vllm:request_queue_time_seconds_bucket", done, f'le="{le}"')
    for name in ("vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_bucket"):
        text = _set(text, name, done, 'le="+Inf"')
    return text


def window(running: int, waiting: int, preempted_in_window: int, **kw):
    before = at_scale(running, waiting, 100.0, **kw)
    after = at_scale(running, waiting, 100.0 + preempted_in_window, finished=FINISHED, **kw)
    return judged_pair(before, after, GAP_S, "vllm")


@pytest.mark.parametrize("running, preempted", [(152, 8), (160, 37), (192, 47)],
                         ids=["1.04x-the-wall", "1.10x", "1.32x"])
def test_preemptions_while_requests_queue_are_the_kv_wall(running, preempted):
    result, frame = window(running, 16, preempted)
    assert result.verdict == "firing" and result.root_stage == "kv_cache", \
        [(s.stage, s.state, s.explanation) for s in result.stages]
    wall = next(e for e in result.stage("kv_cache").evidence if e.signal == "kv_wall_preemptions")
    assert wall.state == "firing" and wall.value == pytest.approx(preempted / FINISHED)
    assert f"{preempted} preemptions in the window against {FINISHED} requests finished" in wall.how
    advice = " | ".join(r.text for r in result.stage("kv_cache").recommendations)
    # the pool's arithmetic from the scrape: 291,168 tokens / 2,000 a request = 146 at once
    assert f"pool {POOL:,} tokens ÷ ~2,000 a request ≈ 146 at once; {running} ran at once" in advice
    assert "--max-num-seqs 138:" in advice          # 146 less a 5% margin
    assert "--gpu-memory-utilization 0.9 (now 0.8)" in advice
    assert "--kv-cache-dtype fp8" in advice
    assert "conservative profile" not in advice
    # the queue is the wall's consequence, and its advice says so, without the report's profile beside it
    scheduler = result.stage("scheduler")
    assert scheduler.consequence_of == "kv_cache"
    assert not any("conservative profile" in r.text for r in scheduler.recommendations)


def test_prefix_caching_off_is_named_at_the_wall():
    result, _ = window(160, 16, 37)
    advice = " | ".join(r.text for r in result.stage("kv_cache").recommendations)
    assert "--enable-prefix-caching" not in advice           # the capture has it on
    off = {k: v.replace('enable_prefix_caching="True"', 'enable_prefix_caching="False"')
           for k, v in (("before", at_scale(160, 16, 100.0)), ("after", at_scale(160, 16, 137.0, finished=FINISHED)))}
    result, frame = judged_pair(off["before"], off["after"], GAP_S, "vllm")
    assert frame.engine.engine.enable_prefix_caching is False
    advice = " | ".join(r.text for r in result.stage("kv_cache").recommendations)
    assert "--enable-prefix-caching: off now" in advice


def test_a_pool_already_given_its_memory_is_not_told_to_take_more():
    result, _ = window(160, 16, 37, memory_share="0.95")
    advice = " | ".join(r.text for r in result.stage("kv_cache").recommendations)
    assert result.root_stage == "kv_cache" and "--gpu-memory-utilization" not in advice
    assert "--max-num-seqs 138:" in advice


def test_below_the_wall_a_pinned_batch_is_the_schedulers_with_the_pools_room():
    """100 running at every scrape in a pool that holds 146, no preemption, 16 waiting 15-20 s: the batch is held
    at its limit, and the pool says how far it may rise."""
    result, frame = window(100, 16, 0)
    assert result.verdict == "firing" and result.root_stage == "scheduler", \
        [(s.stage, s.state, s.explanation) for s in result.stages]
    assert result.stage("kv_cache").state == "ok"
    wall = next(e for e in result.stage("kv_cache").evidence if e.signal == "kv_wall_preemptions")
    assert wall.state == "ok" and wall.value == 0
    advice = " | ".join(r.text for r in result.stage("scheduler").recommendations)
    assert "--max-num-seqs 138: the batch is held at its limit of 100" in advice
    assert f"the pool holds {POOL:,} tokens ÷ ~2,000 a request ≈ 146 at once" in advice


def test_a_queue_with_no_lever_in_the_scrape_says_what_was_checked():
    """Requests queued 15-20 s in the window, none waiting at the scrapes, no preemption: no batch limit or KV
    wall to point at; the advice says what was checked and what is missing, not the report's profile alone."""
    result, _ = window(100, 0, 0)
    assert result.root_stage == "scheduler", [(s.stage, s.state, s.explanation) for s in result.stages]
    advice = [r.text for r in result.stage("scheduler").recommendations]
    assert advice[0].startswith("no lever found in the scrape") and "traces" in advice[0]


def test_an_idle_pair_at_scale_reads_ok():
    result, _ = window(0, 0, 0, queued_s=0.0)
    assert result.verdict == "ok" and result.exit_code == 0, result.unavailable


def test_outputs_cut_at_their_length_are_said_with_their_lever_never_raising_the_stage():
    """An idle window in which 240 requests ended on their own and 240 at their length limit: the KV cache stage
    stays ok (a cut answer is no latency problem), and says so, with the lever, after its own account."""
    before = at_scale(0, 0, 0.0, queued_s=0.0)
    after = _set(at_scale(0, 0, 0.0, finished=FINISHED, queued_s=0.0), "vllm:request_success_total",
                 float(FINISHED), 'finished_reason="length"')
    result, _ = judged_pair(before, after, GAP_S, "vllm")
    kv = result.stage("kv_cache")
    cut = next(e for e in kv.evidence if e.signal == "outputs_cut_at_length")
    assert cut.state == "warn" and cut.value == pytest.approx(0.5)
    assert kv.state == "ok" and result.verdict == "ok"
    assert "; also requests cut at their length limit" in kv.explanation and "max_tokens" in kv.explanation
