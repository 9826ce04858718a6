"""What is inferred of an engine read from outside (agent/sources/inference/figures.py), on
hand-made gauges and
request timelines whose answers are worked out in the comments."""

import dataclasses

import pytest

from stagelens.engine_hooks.records.timeline import QUEUED, PrefillChunk, RequestTimeline, Wait
from stagelens.engine_hooks.records.waits import MAX_NUM_SEQS, MODEL_LOADING, NO_FREE_BLOCKS
from stagelens.sources.inference.figures import (
    Counted,
    Gauges,
    KvCapacity,
    charge_queued,
    decided_wait_p99,
    decided_waits,
    fragmentation,
    full_while_waiting,
    head_of_line_share,
    held_tokens,
    mark_preemptions,
    ordinary_step_bounds,
    pinned_batch,
    queued_mean_wait,
    sustained_p99,
    wait_seconds_by_reason,
)
from stagelens.sources.scrape.families import HistogramDelta, length_biased_mean
from stagelens.sources.scrape.prometheus_text import Family, Sample


def span(rid: str, arrival: float, queue: float, prefill: float, prompt: int, end: float) -> RequestTimeline:
    """A request as an llm_request span gives it: queued, then one prefill, then decode to its end."""
    tl = RequestTimeline(rid, "m", prompt, output_tokens=8, arrival=arrival, finished=end,
                         first_token=arrival + queue + prefill)
    if queue:
        tl.waits.append(Wait(arrival, arrival + queue, QUEUED))
    tl.chunks.append(PrefillChunk(arrival + queue, arrival + queue + prefill, prompt, 0))
    return tl


def test_a_wait_for_the_step_in_progress_is_no_decision_but_one_behind_a_long_prefill_is():
    short_step = span("a", 0.0, 0.0, 0.30, 100, 1.0)        # a short prompt's prefill runs 0.0-0.3
    waited_it_out = span("b", 0.1, 0.2, 0.05, 50, 1.0)       # arrived mid-step, scheduled at its end
    long_step = span("c", 2.0, 0.0, 1.50, 1800, 4.0)         # a long prompt's prefill runs 2.0-3.5
    behind_long = span("d", 2.5, 1.0, 0.05, 50, 4.0)         # arrived during it: waited 1.0 s behind it
    waits = decided_waits([short_step, waited_it_out, long_step, behind_long], period=0.02)
    assert waits == pytest.approx([0.0, 0.0, 0.0, 1.0])      # all of it: chunked prefill would have let it in
    # the same short request's wait, entirely behind the long prefill, is head-of-line blocking
    share = head_of_line_share([short_step, waited_it_out, long_step, behind_long], period=0.02)
    assert share.value == pytest.approx((1.0 - 0.02) / ((0.2 - 0.02) + (1.0 - 0.02)))


def test_waits_by_reason_by_littles_law_with_the_cache_full_or_adapters_loading():
    full = Gauges(at=1.0, running=3, waiting=4, kv_ratio=0.95)           # no room: the 4 wait for blocks
    roomy = Gauges(at=2.0, running=3, waiting=2, kv_ratio=0.30)          # room: the 2 wait for the scheduler
    reserved = Gauges(at=3.0, running=2, waiting=1, kv_ratio=0.70)       # 0.35 a request, 0.30 free: full
    out = wait_seconds_by_reason([full, roomy, reserved], span=10.0)
    assert out.value == pytest.approx({NO_FREE_BLOCKS: (4 + 1) / 3 * 10, QUEUED: 2 / 3 * 10})
    loading = Gauges(at=1.0, running=1, waiting=3, deferred=2, kv_ratio=0.1, adapters=True)
    out = wait_seconds_by_reason([loading], span=10.0)
    assert out.value == pytest.approx({MODEL_LOADING: 20.0, NO_FREE_BLOCKS: 0.0, QUEUED: 10.0})
    # adapters, but who was deferred is not published: model loads stay not observable
    blind = Gauges(at=1.0, running=1, waiting=3, kv_ratio=0.1, adapters=True)
    assert MODEL_LOADING not in wait_seconds_by_reason([blind], span=10.0).value
    assert wait_seconds_by_reason([full], span=0.0) is None


def test_tokens_held_by_bookkeeping_and_fragmentation_against_slots_in_use():
    counted = Counted(prompt_tokens=10_000, generated_tokens=3_000, finished_prompt_tokens=9_000,
                      finished_generated_tokens=2_800, finished_prompts=90, running=5, first_tokens=94, ended=90)
    # 1,200 in the running requests past their first token; 5 running, 4 past it: 1 in prefill, 50 on average
    assert held_tokens(counted) == pytest.approx(1_200 + 1 * (9_000 / 90) / 2)
    assert held_tokens(Counted(prompt_tokens=1.0)) is None
    gauges = [Gauges(at=1.0, running=5, kv_ratio=0.5, held_tokens=1_250.0),
              Gauges(at=2.0, running=5, kv_ratio=0.5, held_tokens=750.0)]
    # 0.5 x 250 blocks x 16 = 2,000 slots a scrape; 1,000 tokens held on average, 5 x 15 slots the running
    # requests' last blocks may leave empty: the block size's floor, no waste
    frag = fragmentation(gauges, KvCapacity(num_blocks=250, tokens=4_000, block_size=16))
    assert frag.value == pytest.approx((2_000 - 1_000 - 5 * 15) / 2_000)
    assert "the block size's floor" in frag.how
    assert fragmentation(gauges, None) is None


def test_one_short_request_in_a_large_block_is_no_fragmentation():
    """vLLM's CPU build: blocks of 128 tokens. Requests of 32 + 48 tokens each leave most of their one block
    empty, which no allocator avoids: that is the block size's floor, not fragmentation to page on."""
    cpu_cache = KvCapacity(num_blocks=8_192, tokens=8_192 * 128, block_size=128, reserved_blocks=1)
    one = [Gauges(at=float(t), running=1, kv_ratio=2 / 8_192, held_tokens=60.0) for t in range(3)]
    frag = fragmentation(one, cpu_cache)
    assert frag.value is None and "not judged" in frag.how     # 1 block in use: no pattern
    busy = [Gauges(at=float(t), running=6, kv_ratio=7 / 8_192, held_tokens=6 * 70.0) for t in range(3)]
    assert fragmentation(busy, cpu_cache).value == pytest.approx(0.0)
    # a contiguous allocator's reservation is far past one block a request: still judged as waste
    hoarded = [Gauges(at=float(t), running=6, kv_ratio=(6 * 16 + 1) / 8_192, held_tokens=6 * 70.0) for t in range(3)]
    assert fragmentation(hoarded, cpu_cache).value > 0.8


def test_held_tokens_do_not_drift_with_requests_that_never_finished():
    """A V0 server's lifetime: 31,031 tokens counted for requests that got a first token and never finished
    (aborted): none of them is held once nothing runs, and never more than the running requests hold."""
    drifted = dict(prompt_tokens=140_000, generated_tokens=60_000, finished_prompt_tokens=120_000,
                   finished_generated_tokens=48_969, finished_prompts=400, first_tokens=410, ended=400,
                   longest_request=2_000 + 1_000)     # no finished prompt over 2,000 tokens, no output over 1,000
    assert held_tokens(Counted(**drifted, running=0)) == 0.0
    # 2 running: at most 2 x 3,000 tokens, not the 31,031 the bookkeeping says
    assert held_tokens(Counted(**drifted, running=2)) == pytest.approx(2 * 3_000)
    # half the prompt tokens came from the prefix cache: shared blocks, no slots of their own (300 a prompt)
    assert held_tokens(Counted(**drifted, running=2, prefix_hit_share=0.5)) == pytest.approx(2 * 3_000 - 2 * 300 * 0.5)
    # a bound, not an estimate: running requests holding less keep what the bookkeeping says
    fresh = {**drifted, "prompt_tokens": 120_500, "generated_tokens": 53_000}
    assert held_tokens(Counted(**fresh, running=2)) == pytest.approx(120_500 + 53_000 - 120_000 - 48_969)


def test_early_in_a_run_the_long_prompts_running_are_not_cut_to_the_short_ones_finished():
    """hol-blocking's first scrapes: 3 short requests finished (none over 250 tokens), 6 running past their
    first token with long prompts among them. Nothing has drifted (6 past their first token and unfinished, 6
    running), so the bookkeeping stands: 2,240 tokens held, not 6 x 250."""
    early = Counted(prompt_tokens=2_468, generated_tokens=185, finished_prompt_tokens=305,
                    finished_generated_tokens=108, finished_prompts=3, running=6, first_tokens=9, ended=3,
                    longest_request=250)
    assert held_tokens(early) == pytest.approx(2_468 + 185 - 305 - 108)
    # the same counts with 4 more requests past their first token that never finished: drifted, so bounded
    assert held_tokens(dataclasses.replace(early, first_tokens=13)) == pytest.approx(6 * 250)


def test_a_prompt_found_in_its_prefill_is_weighted_by_its_length():
    """9 prompts of ~100 tokens and 1 of ~2,000 (bucket middles): the mean prompt is 290, but a prompt found
    in its prefill is the long one more often: E[L^2] / E[L] = (9 x 100^2 + 2,000^2) / 2,900 tokens."""
    def bucket(le, count):
        return Sample("p_bucket", {"le": le}, count)
    prompts = Family("p", "histogram", (bucket("200.0", 9), bucket("3800.0", 10), bucket("+Inf", 10),
                                        Sample("p_count", {}, 10), Sample("p_sum", {}, 2_900)))
    assert length_biased_mean(prompts) == pytest.approx((9 * 100**2 + 2_000**2) / 2_900)
    assert length_biased_mean(Family("p", "histogram", (bucket("+Inf", 0), Sample("p_count", {}, 0)))) is None


def test_the_reserved_block_and_a_forced_block_size_are_not_fragmentation():
    idle = [Gauges(at=1.0, running=0, kv_ratio=1 / 850, held_tokens=0.0)]
    v1 = KvCapacity(num_blocks=850, tokens=850 * 16, block_size=16, reserved_blocks=1)
    assert fragmentation(idle, v1) is None                          # the null block only: no slot in use
    v0 = KvCapacity(num_blocks=850, tokens=850 * 16, block_size=16)
    assert "1.0 KV blocks in use" in fragmentation(idle, v0).how    # V0 has no such block: one is one in use
    one = [Gauges(at=1.0, running=1, kv_ratio=5 / 850, held_tokens=64.0)]   # 4 blocks of 16 held, and one more
    assert fragmentation(one, v1).value == pytest.approx(0.0)
    assert fragmentation(one, v0).value == pytest.approx((80 - 64 - 15) / 80)   # V0's fifth block is in use
    hybrid = KvCapacity(num_blocks=208, tokens=141_994, block_size=784, reserved_blocks=1, forced_block_size=True)
    busy = [Gauges(at=1.0, running=4, kv_ratio=0.5, held_tokens=1_000.0)]
    found = fragmentation(busy, hybrid)
    assert found.value is None and "the model sets the block size (784 tokens" in found.how


def test_a_full_kv_cache_with_a_queue_or_preemptions_counts_against_the_kv_cache():
    scrapes = [Gauges(at=0.0, running=40, waiting=16, kv_ratio=0.985, preemptions=10.0),
               Gauges(at=1.0, running=40, waiting=15, kv_ratio=0.985, preemptions=13.0),
               Gauges(at=2.0, running=40, waiting=0, kv_ratio=0.985, preemptions=16.0),    # preempted, no queue
               Gauges(at=3.0, running=40, waiting=0, kv_ratio=0.985, preemptions=16.0),    # full, nothing pressed
               Gauges(at=4.0, running=40, waiting=9, kv_ratio=0.40, preemptions=16.0)]     # a queue, room left
    found = full_while_waiting(scrapes)
    assert found.value == pytest.approx(2 / 4) and "at 2 of 4 samples" in found.how
    assert full_while_waiting([Gauges(at=0.0, kv_ratio=0.99)]) is None


def sampled_preempting(every_s: float) -> list[Gauges]:
    """10 s of an engine sampled every `every_s`: a queue of 4, the KV cache 60% in use at every sample, and one
    preemption every 2 s (at 2, 4, ... 10 s)."""
    return [Gauges(at=i * every_s, running=8, waiting=4, kv_ratio=0.6, preemptions=float(i * every_s // 2))
            for i in range(round(10 / every_s) + 1)]


def test_a_preemption_with_room_seen_is_the_kv_caches_evidence_however_often_it_is_sampled():
    """vLLM preempts a running request only when it cannot allocate a KV block: the cache was full then, whatever
    a later sample reads. Each preemption counts as 0.25 s of a full cache (one sample of the gauge poll's), so 5
    in 10 s read 0.125 whether the samples came four a second or one in 2 s (counted whole, a busy host's few
    samples would read 1.0, FIRING, where the poll's read 0.125, ok)."""
    often, seldom = sampled_preempting(0.25), sampled_preempting(2.0)
    for samples in (often, seldom):
        found = full_while_waiting(mark_preemptions(samples, per_preemption_s=0.25))
        assert found.value == pytest.approx(5 * 0.25 / 10), len(samples)
        assert "preemption" in found.how
    assert full_while_waiting(often).value == 0.0     # SGLang's retractions are not marked: they need a full cache
    # the queue waited for blocks as long as the share says: 4 waiting, an eighth of 5 of the 6 samples' time
    marked = mark_preemptions(seldom, per_preemption_s=0.25)
    assert wait_seconds_by_reason(marked, 10.0).value[NO_FREE_BLOCKS] == pytest.approx(4 * 0.125 * 5 / 6 * 10)


def test_a_share_of_fewer_than_three_samples_is_not_given():
    """Two samples can only read 0, 1/2 or 1: ok or FIRING by the signal's lines (0.2, 0.5), nothing between, so
    the same cache read from two samples or from ten could be ok once and FIRING the other: not given, saying why."""
    full = [Gauges(at=float(t), running=40, waiting=16, kv_ratio=0.985) for t in range(4)]
    few = full_while_waiting(full[:3])
    assert few.value is None and "2 samples" in few.how and "too few" in few.how
    assert full_while_waiting(full).value == 1.0


def test_a_request_passed_over_at_a_step_boundary_its_spans_show_was_held_from_there():
    chunked = span("a", 0.0, 0.0, 0.40, 128, 1.0)          # a short prompt prefilled over several steps, 0.0-0.4
    budget_wait = span("b", 0.05, 0.30, 0.05, 50, 1.0)      # arrived in its first step, scheduled at 0.35
    # no step began or ended between its arrival and its scheduling, as the spans show: the step in progress
    assert decided_waits([chunked, budget_wait], period=0.02) == [0.0, 0.0]
    # another request's first token at 0.1 ended a step that did not let it in: held from there
    quick = span("c", 0.0, 0.0, 0.10, 20, 2.0)
    assert decided_waits([chunked, budget_wait, quick], period=0.02)[1] == pytest.approx(0.35 - 0.10)
    # the step in progress ends a little before the next one schedules: 5 ms after c's first token is on time
    on_time = span("d", 0.05, 0.055, 0.05, 50, 1.0)
    assert decided_waits([quick, on_time], period=0.02)[1] == 0.0


def test_a_long_step_on_a_noisy_host_is_no_decision_however_the_inter_token_p99_reads():
    """healthy-closed through vLLM's interfaces, seed 2: a closed loop of four, where each arrival meets the
    step after a finish; steps of 180 ms on a busy host where the inter-token P99 read 140 ms. Bounded by that
    P99, two requests read 40 ms decided and the scheduler fired; nothing began or ended while they waited."""
    steps = [span(f"s{i}", 0.2 * i, 0.0, 0.03, 100, 0.2 * i + 0.15) for i in range(10)]   # all done by 1.95
    slow_step = [span("x", 2.02, 0.18, 0.03, 100, 3.0), span("y", 2.03, 0.17, 0.03, 100, 3.0)]
    assert decided_waits([*steps, *slow_step], period=0.03)[-2:] == [0.0, 0.0]
    # the same wait past a step that ended (s10's first token at 2.04) was the scheduler's
    ended = span("s10", 2.01, 0.0, 0.03, 100, 2.6)
    assert decided_waits([*steps, ended, *slow_step], period=0.03)[-1] == pytest.approx(2.20 - 2.04)


def itl(counts: dict[float, int]) -> HistogramDelta:
    """An inter-token histogram delta with vLLM's first buckets: bucket upper bound -> observations in it."""
    bounds, total, buckets = (0.025, 0.05, 0.1, 0.2, 0.5, 0.75, 1.0, 2.5, float("inf")), 0, []
    for b in bounds:
        total += counts.get(b, 0)
        buckets.append((b, total))
    return HistogramDelta(buckets=buckets, count=total, sum=0.0)


def test_the_stalls_of_long_prefills_are_no_ordinary_step_and_a_wait_behind_them_is_decided():
    # 97 ordinary steps of 25-50 ms and 3 observations of 0.5-0.75 s: the P99 lands among the latter
    histogram = itl({0.05: 97, 0.75: 3})
    long_prefill = span("L", 0.0, 0.0, 0.60, 1800, 2.0)         # a 1800-token prompt prefilled 0.0-0.6 in one step
    decoders = [span(f"d{i}", -1.0, 0.0, 0.05, 100, 3.0) for i in range(3)]   # decoding through it: 3 stalls
    behind = span("x", 0.1, 0.5, 0.05, 50, 1.0)                # arrived during it, waited 0.5 s for it to end
    timelines = [long_prefill, *decoders, behind]
    # the observations from the long prefill's bucket (0.5, 0.75] up are its stalls: without them, the P99 of the
    # 97 left in (0.025, 0.05] interpolates to 0.025 + 0.025 x 0.99
    assert ordinary_step_bounds(histogram, timelines)[0] == pytest.approx(0.025 + 0.025 * 0.99)
    # and the wait behind the long prefill is the scheduler's, whole, as the hooks charge it
    assert decided_waits(timelines, period=0.04)[-1] == pytest.approx(0.5)
    # no long prefill in the spans (nor a step count): the stalls stay, the P99 among them
    assert ordinary_step_bounds(histogram, [behind])[0] == pytest.approx(0.5 + 0.25 * (99 - 97) / 3)


def test_a_wait_past_the_longest_step_seen_is_decided_where_the_spans_show_no_boundary():
    """sched-tiny-budget through vLLM's interfaces: requests wait several 30 ms steps for the token budget while
    nothing the spans show begins or ends; no step in progress is longer than the longest step decoders saw."""
    histogram = itl({0.025: 90, 0.05: 10})               # no step past 50 ms
    assert ordinary_step_bounds(histogram, [])[1] == 0.05
    budget_waits = [span(f"b{i}", 0.01 * i, 0.20, 0.03, 50, 1.0) for i in range(2)]
    assert decided_waits(budget_waits, period=0.03) == [0.0, 0.0]        # unbounded: the step in progress
    assert decided_waits(budget_waits, period=0.03, longest_step=0.05) == pytest.approx([0.15, 0.15])
    # a long prefill's stalls are no ordinary step, and an unbounded longest bucket bounds nothing
    long_prefill = span("L", 0.0, 0.0, 0.60, 1800, 2.0)
    assert ordinary_step_bounds(itl({0.025: 90, 0.75: 3}), [long_prefill])[1] == 0.025
    assert ordinary_step_bounds(itl({0.025: 90, float("inf"): 1}), [])[1] is None
    assert ordinary_step_bounds(itl({}), [])[1] is None


def test_long_prefills_whose_spans_are_not_in_yet_are_counted_by_the_steps_that_held_them():
    # 2 of 100 steps scheduled over 1,024 tokens: long prompts prefilled whole, their requests still decoding;
    # 2% of the inter-token observations, the longest, are their stalls
    steps = HistogramDelta(buckets=[(512.0, 98), (1024.0, 98), (2048.0, 100), (float("inf"), 100)], count=100, sum=0)
    histogram = itl({0.05: 490, 2.5: 10})                 # 2% of 500: all 10 long gaps
    assert ordinary_step_bounds(histogram, [], steps)[0] == pytest.approx(0.025 + 0.025 * 0.99)
    assert ordinary_step_bounds(histogram, [])[0] > 1.0        # without the steps' count: the stalls bound every wait


def test_no_inter_token_latency_no_bound():
    assert ordinary_step_bounds(itl({}), [])[0] is None


def test_one_request_held_alone_is_no_scheduler_pattern():
    assert sustained_p99([0.0] * 30 + [0.4]) == 0.0                  # one stalled request among 31
    assert sustained_p99([0.0] * 30 + [0.4, 0.3]) == pytest.approx(0.3)   # two: the second longest bounds it
    assert sustained_p99([0.4]) == 0.0
    many = [i / 1000 for i in range(1000)]                           # a thousand: the P99 itself
    assert sustained_p99(many) == pytest.approx(0.98901)
    # through the spans: one request that waited 0.3 s past any step while 9 went straight in reads 0
    alone = [span("a", 5.0, 0.3, 0.05, 50, 6.0)] + [span(f"s{i}", float(i), 0.0, 0.05, 50, i + 0.5) for i in range(9)]
    assert decided_wait_p99(alone, period=0.02).value == 0.0


def test_a_wait_is_charged_by_the_reasons_seen_while_it_waited_else_by_the_window():
    loading = span("early", 1.0, 2.0, 0.05, 50, 4.0)            # waited 1.0-3.0 while a model loaded
    later = span("late", 20.0, 0.5, 0.05, 50, 21.0)             # waited 20.0-20.5, no poll in between
    polls = [Gauges(at=1.5 + 0.25 * i, running=0, waiting=2, deferred=2, kv_ratio=0.1, adapters=True) for i in range(6)]
    window = {QUEUED: 5.0}                                        # the latest window: a plain queue
    early, late = charge_queued([loading, later], window, polls)
    assert early.ttft_components[MODEL_LOADING] == pytest.approx(2.0) and QUEUED not in early.ttft_components
    assert late.ttft_components[QUEUED] == pytest.approx(0.5)
    # without the polls, both are charged by the window's mix
    assert QUEUED in charge_queued([loading], window)[0].ttft_components


def test_a_queue_that_hardly_moves_bounds_the_wait_before_any_of_it_ends():
    # 60 s queued for the scheduler in the window (6 waiting on average over 10 s), 2 first tokens, 4 waiting now
    assert queued_mean_wait({QUEUED: 60.0, NO_FREE_BLOCKS: 30.0}, admitted=2, waiting_now=4) == (10.0, 6)
    assert queued_mean_wait({NO_FREE_BLOCKS: 30.0}, admitted=2, waiting_now=4) is None      # no queue of its own
    assert queued_mean_wait({QUEUED: 0.0}, admitted=0, waiting_now=0) is None
    # no request ended in the window: the mean less the step in progress (one 0.05 s period) is the bound
    assert decided_wait_p99([], 0.05, queued=(10.0, 6)).value == pytest.approx(9.95)
    assert decided_wait_p99([], 0.05, queued=(10.0, 1)) is None       # one request is no pattern
    # a healthy window: queued about one step each, which the step in progress explains
    steps = itl({0.05: 100})
    assert decided_wait_p99([], 0.05, ordinary_step_bounds(steps, [])[0], queued=(0.04, 20)) is None
    # finished requests that waited longer keep their own figure
    went_in = span("in", 0.0, 0.0, 0.05, 50, 0.5)               # its first token ended a step at 0.05
    waited = [went_in] + [span(f"w{i}", 0.0, 12.0, 0.05, 50, 13.0) for i in range(3)]
    assert decided_wait_p99(waited, 0.05, queued=(10.0, 6)).value == pytest.approx(12.0 - 0.05)


def test_before_any_request_finished_the_prompts_in_prefill_are_held():
    """hol-blocking's first scrape: 4 running, 1 past its first token (a 100-token prompt, 5 generated), none
    finished. The 3 in prefill hold half a prompt each as the one counted: 105 + 3 x 50, not 105 (read as
    fragmentation against the slots their prefill holds)."""
    first = Counted(prompt_tokens=100, generated_tokens=5, finished_prompt_tokens=0, finished_generated_tokens=0,
                    finished_prompts=0, running=4, first_tokens=1, ended=0)
    assert held_tokens(first) == pytest.approx(105 + 3 * 100 / 2)
    # the finished requests' histograms not published yet: no request finished, so their sums are 0 all the same
    absent = dataclasses.replace(first, finished_prompt_tokens=None, finished_generated_tokens=None,
                                 finished_prompts=None)
    assert held_tokens(absent) == pytest.approx(105 + 3 * 100 / 2)
    # nothing past its first token yet: the prompts' lengths are not known, so neither are the tokens held
    assert held_tokens(Counted(prompt_tokens=0, generated_tokens=0, finished_prompt_tokens=0,
                               finished_generated_tokens=0, finished_prompts=0, running=4, first_tokens=0,
                               ended=0)) is None
    # no count published at all (an engine without these histograms): still not known
    assert held_tokens(dataclasses.replace(absent, ended=None)) is None


def test_a_batch_that_never_grows_while_a_queue_waits_with_free_blocks_is_held_at_its_limit():
    held = [Gauges(at=float(t), running=2, waiting=6, kv_ratio=0.01) for t in range(8)]
    held.insert(4, Gauges(at=4.5, running=1, waiting=6, kv_ratio=0.01))    # between an end and the next admission
    limit = pinned_batch(held)
    assert limit.value == 2 and "2 running at 8 of the 9 samples" in limit.how
    by_reason = wait_seconds_by_reason(held, span=9.0).value
    assert by_reason[MAX_NUM_SEQS] > 0.8 * sum(by_reason.values())
    # a batch that varies as prefills come and go is held by something else (a token budget)
    varying = [Gauges(at=float(t), running=r, waiting=4, kv_ratio=0.2) for t, r in enumerate([3, 5, 2, 6, 4, 3])]
    assert pinned_batch(varying) is None and MAX_NUM_SEQS not in wait_seconds_by_reason(varying, span=6.0).value
    # with the KV cache full, the queue waits for blocks, not for a seat
    full = [Gauges(at=float(t), running=2, waiting=6, kv_ratio=0.97) for t in range(6)]
    assert pinned_batch(full) is None
    assert pinned_batch(held[:2]) is None                                  # two samples: no pattern yet
