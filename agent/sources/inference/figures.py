"""Figures of the engine snapshot inferred from what an engine publishes, each with how it was read.

An engine read from outside (vLLM, SGLang) publishes gauges at the scrape, counters and coarse
histograms and, where its traces reach the agent, one span per request. None of them is a stagelens
figure; each function here turns them into one, says how in words with the numbers (the snapshot's
`inferred`, which the diagnosis shows beside the evidence), and returns None where what is published
does not settle it.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Generic, TypeVar

from stagelens.engine_hooks.records.attribution import components
from stagelens.engine_hooks.records.stats import percentile
from stagelens.engine_hooks.records.timeline import QUEUED, RequestTimeline
from stagelens.engine_hooks.records.waits import MAX_NUM_SEQS, MODEL_LOADING, NO_FREE_BLOCKS
from stagelens.sources.inference.wait_bounds import WaitBounds
from stagelens.sources.scrape.families import HistogramDelta, quantile_interpolated

# as the hooks judge head-of-line blocking (engine_hooks.hooks.recorder)
LONG_PREFILL_TOKENS = 512
# a step past this holds a long prompt's prefill whole (chunked prefill's default budget is 512
# tokens a step)
LONG_STEP_TOKENS = 2 * LONG_PREFILL_TOKENS
# KV usage past which a waiting queue is taken to wait for blocks: under 10% free, the hooks' "free
# memory" line (engine_hooks.hooks.recorder's free_memory_share)
KV_FULL = 0.90
# fewer requests finished in the window: their P99 speaks for them, not the queue
MIN_FINISHED = 20


@dataclass(frozen=True, slots=True)
class Gauges:
    """One scrape's gauges; None: not published."""
    at: float                       # monotonic seconds of the scrape
    running: float | None = None
    waiting: float | None = None
    deferred: float | None = None   # requests the engine skipped (vLLM's reason="deferred")
    kv_ratio: float | None = None   # KV blocks in use / all
    held_tokens: float | None = None   # tokens in the running requests (held_tokens())
    adapters: bool = False          # the engine serves LoRA adapters (vllm:lora_requests_info)
    preemptions: float | None = None   # preempted (SGLang: retracted) so far: a counter
    # of the time since the sample before, the share its preemptions say the KV cache was full
    # (vLLM: mark_preemptions)
    preempted_share: float | None = None


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Inferred(Generic[T]):
    value: T
    how: str


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def waiting_share(gauges: list[Gauges]) -> Inferred | None:
    """The share of scrapes that found requests waiting (the hooks count steps; a scrape is a
    sample)."""
    seen = [g.waiting > 0 for g in gauges if g.waiting is not None]
    if not seen:
        return None
    share = sum(seen) / len(seen)
    return Inferred(share, f"requests were waiting at {sum(seen)} of {len(seen)} scrapes of num_requests_waiting")


def wait_seconds_by_reason(gauges: list[Gauges], span: float) -> Inferred[dict[str, float]] | None:
    """Seconds spent waiting in the window by reason, by Little's law: the mean number of
    requests waiting for a reason times the window. What an engine publishes does not say who
    waited for KV blocks (vLLM's `capacity` is its whole waiting queue, `deferred` the requests
    it skipped): the queue of a scrape that found the KV cache full is charged to
    `no_free_blocks` (after a preemption with room seen, the share full_share says); with the
    batch held at its limit (pinned_batch), the queue of a scrape that found it there to
    `max_num_seqs`; the rest to `queued` (a reason the engine does not say). `deferred` counts as
    waiting on a model only where the engine serves LoRA adapters (loading one is what defers a
    request there) and the engine publishes who it deferred."""
    if span <= 0:
        return None
    seen = [g for g in gauges if g.waiting is not None]
    if not seen:
        return None
    waiting = [g.waiting for g in seen if g.waiting is not None]   # seen's queues, one a sample
    adapters = any(g.adapters for g in seen) and any(g.deferred is not None for g in seen)
    # per sample, once: charge_queued calls this for every request
    full = [full_share(g) for g in seen]
    limit = pinned_batch(seen)
    at_limit = [limit is not None and not f and g.running == limit.value for g, f in zip(seen, full, strict=True)]
    on_model = [min(g.deferred or 0.0, w) if adapters else 0.0 for g, w in zip(seen, waiting, strict=True)]
    rest = [w - m for w, m in zip(waiting, on_model, strict=True)]
    by_scrape = len(seen)
    no_blocks = sum(r * f for r, f in zip(rest, full, strict=True)) / by_scrape
    batch_full = sum(r for r, held in zip(rest, at_limit, strict=True) if held) / by_scrape
    queued = sum(rest) / by_scrape - no_blocks - batch_full
    out = {QUEUED: queued * span}
    if any(g.kv_ratio is not None for g in seen):
        out[NO_FREE_BLOCKS] = no_blocks * span
    if limit is not None:
        out[MAX_NUM_SEQS] = batch_full * span
    if adapters:
        out[MODEL_LOADING] = sum(on_model) / by_scrape * span
    usage = _mean([g.kv_ratio for g in seen])
    parts = [f"{sum(waiting) / by_scrape:.2f} requests waiting on average over {by_scrape} scrapes"]
    if usage is not None:
        parts.append(f"KV usage {usage:.2f} on average, no room for one more request in "
                     f"{sum(map(bool, full))} of them ({no_blocks:.2f} waiting there: no free "
                     f"blocks)")
    if limit is not None:
        parts.append(f"{batch_full:.2f} waiting while the batch was held at its limit ({limit.how})")
    if adapters:
        parts.append(f"{sum(on_model) / by_scrape:.2f} deferred while LoRA adapters load")
    return Inferred(out, ", ".join(parts) + f", times the {span:.0f} s window")


# samples that found a queue and the same batch, at the least, to call it the batch's limit
PINNED_SAMPLES = 3
# ... and of those that found a queue with room, the share at that batch (a sample may fall between
# a request's end and its successor's admission)
PINNED_SHARE = 0.75


def pinned_batch(gauges: list[Gauges]) -> Inferred | None:
    """The batch limit the samples show, where they show one: the most that ran in the window,
    found at (nearly) every sample (scrape or gauge poll, at least PINNED_SAMPLES) that found
    requests waiting with room in the KV cache. vLLM admits a waiting request whenever its token
    budget, a KV block and --max-num-seqs allow: a batch that never grows while a queue waits and
    blocks are free is held by its limit (a budget-bound batch varies as prefills come and go).
    The limit itself is not published."""
    queued = [g for g in gauges if g.waiting and g.running is not None and g.kv_ratio is not None
              and not kv_full(g)]
    if not queued:
        return None
    limit = max(g.running for g in gauges if g.running is not None)
    at_limit = sum(g.running == limit for g in queued)
    if limit < 1 or at_limit < PINNED_SAMPLES or at_limit < PINNED_SHARE * len(queued):
        return None
    return Inferred(round(limit), f"{limit:.0f} running at {at_limit} of the {len(queued)} samples "
                                  f"that found requests waiting with room in the KV cache, never "
                                  f"more")


def kv_full(g: Gauges) -> bool:
    """Whether the sample found no room in the KV cache for one more request like those running
    (_no_room), or followed a preemption that says the cache was full since the sample before
    (vLLM: mark_preemptions)."""
    return full_share(g) > 0


def full_share(g: Gauges) -> float:
    """How much of the time up to the sample the KV cache had no room: all of it where its usage
    leaves none, else the share its preemptions say (vLLM: mark_preemptions), as for a sample of
    the gauge poll's rate."""
    return 1.0 if _no_room(g) else g.preempted_share or 0.0


def _no_room(g: Gauges) -> bool:
    """Whether the sample's KV usage leaves no room for one more request like those running:
    under 10% free, or less free than a running request holds on average (an allocator reserving
    much per request is full long before 90%)."""
    if g.kv_ratio is None:
        return False
    per_request = g.kv_ratio / g.running if g.running else 0.0
    return g.kv_ratio >= KV_FULL or 1.0 - g.kv_ratio < per_request


@dataclass(frozen=True, slots=True)
class KvCapacity:
    """The KV cache's size as published: its blocks, the tokens they hold in all, and the blocks
    the engine keeps for itself (vLLM V1 takes one null block from the pool at start: an idle V1
    reads 1/num_blocks)."""
    num_blocks: int
    # kv_cache_size_tokens where published, else num_blocks x block_size
    tokens: int
    block_size: int
    reserved_blocks: int = 0
    # a hybrid model's block holds a mamba state: the block size is not a choice
    forced_block_size: bool = False
    lever: str | None = None         # the engine's flag that set the size, with its value
    # whether prompts' blocks are shared (vLLM's enable_prefix_caching label); None: not published
    prefix_caching: bool | None = None

    @property
    def tokens_per_block(self) -> float:
        return self.tokens / self.num_blocks


# fewer blocks in use on average: a few requests' partial blocks, no pattern to judge
MIN_BLOCKS_IN_USE = 4


def fragmentation(gauges: list[Gauges], kv: KvCapacity | None) -> Inferred | None:
    """The share of reserved KV slots holding no token, over the window's scrapes: slots in use
    (KV usage x blocks, less the engine's reserved blocks, x tokens a block) against the tokens
    the running requests hold (Gauges.held_tokens), less the block size's floor: each running
    request's last block is partly empty whatever the allocator does (vLLM's CPU blocks hold 128
    tokens: one short request leaves most of its block empty), so up to a block less one token a
    request is not waste. Not judged with fewer than MIN_BLOCKS_IN_USE blocks in use on average,
    nor where the model forces the block size: a hybrid model's block is sized to hold a mamba
    state, so its empty attention slots are the model's, not a setting's (Inferred with no value,
    saying so)."""
    if kv is None or not kv.num_blocks:
        return None
    if kv.forced_block_size:
        return Inferred(None, f"not judged: the model sets the block size ({kv.block_size} tokens, "
                              f"a hybrid attention + mamba layout: {kv.tokens:,} tokens in "
                              f"{kv.num_blocks:,} blocks)")
    seen = [(max(0, round(g.kv_ratio * kv.num_blocks) - kv.reserved_blocks), g.held_tokens,
             g.running or 0.0)
            for g in gauges if g.kv_ratio is not None and g.held_tokens is not None]
    seen = [(blocks, held, running) for blocks, held, running in seen if blocks > 0]
    if not seen:
        return None
    blocks = sum(b for b, _, _ in seen) / len(seen)
    if blocks < MIN_BLOCKS_IN_USE:
        return Inferred(None, f"not judged: {blocks:.1f} KV blocks in use on average (of "
                              f"{kv.num_blocks:,}), fewer than {MIN_BLOCKS_IN_USE}: the running "
                              f"requests' last, partial blocks, not a pattern")
    reserved = blocks * kv.tokens_per_block
    held = min(reserved, sum(h for _, h, _ in seen) / len(seen))
    running = sum(r for _, _, r in seen) / len(seen)
    floor = min(reserved - held, running * (kv.tokens_per_block - 1))
    less = f", less {kv.reserved_blocks} reserved" if kv.reserved_blocks else ""
    return Inferred((reserved - held - floor) / reserved,
                    f"{reserved:,.0f} KV slots in use on average (kv_cache_usage_perc x "
                    f"{kv.num_blocks:,} blocks{less}, x {kv.tokens_per_block:g} tokens a block) "
                    f"against {held:,.0f} tokens held by running requests (prompt and generation "
                    f"tokens counted, less those of the requests finished, at most what the "
                    f"running requests hold on average, prefix-cache hits shared) and {floor:,.0f} "
                    f"slots their last blocks leave empty ({running:.1f} running, up to "
                    f"{kv.tokens_per_block - 1:g} each: the block size's floor) over {len(seen)} "
                    f"scrapes")


def mark_preemptions(samples: list[Gauges], per_preemption_s: float) -> list[Gauges]:
    """vLLM's samples (in time order) with `preempted_share` set from the preemptions counted
    since the sample before. vLLM preempts a running request only when it cannot allocate it a KV
    block (V1 when allocate_slots fails, V0 when it cannot append slots; else only an operator's
    reset of the prefix cache), so the cache was full then, whatever usage the sample, taken
    later, reads. For how long is not published: each preemption counts as `per_preemption_s` of
    the time between the two samples (the gauge poll's period: what a sample at its rate would
    find), so a busy host's few samples far apart read as many close together would, rather than
    full all along. SGLang's retractions are not marked: that each one came for want of room is
    not established here for every release (its counter is recent; the older gauge counts those
    retracted now), so they count where the usage seen leaves no room (full_while_waiting)."""
    return samples[:1] + [dataclasses.replace(g, preempted_share=_preempted_share(before, g, per_preemption_s))
                          for before, g in itertools.pairwise(samples)]


def _preempted_share(before: Gauges, g: Gauges, per_preemption_s: float) -> float | None:
    if g.preemptions is None or before.preemptions is None:
        return None
    # fewer: a restart, which says nothing of the time between
    rise = g.preemptions - before.preemptions
    if rise <= 0:
        return 0.0
    span = g.at - before.at
    return min(1.0, rise * per_preemption_s / span) if span > 0 else 1.0


# a share of fewer can only read 0, 1/2 or 1: ok or firing by the signal's default lines (0.2, 0.5),
# nothing between, so the same window could read ok on one run and FIRING on the next
FEWEST_SAMPLES = 3


def full_while_waiting(scrapes: list[Gauges]) -> Inferred | None:
    """The share of samples, scrapes and the gauge polls between them (each against the one
    before), that found the KV cache with no room for one more request (_no_room) while requests
    waited or were preempted since (an engine sets its KV usage once a step, so one scrape a
    window can miss it): a queue the KV cache holds back, the KV cache's evidence that the
    scheduler's queue is its consequence. A sample after a preemption with room seen counts for
    the share of its time the preemptions say the cache was full (vLLM: mark_preemptions). The
    same test charges the queue's wait to `no_free_blocks` (wait_seconds_by_reason, by
    full_share), so the stage that fires and the charge agree. Fewer than FEWEST_SAMPLES samples
    give no share, saying so."""
    seen = [share for before, g in itertools.pairwise(scrapes) if (share := _full_while_pressed(before, g)) is not None]
    if not seen:
        return None
    how = (f"the KV cache had no room for one more request while requests waited or were preempted "
           f"at {round(sum(seen), 2):g} of {len(seen)} samples")
    if len(seen) < FEWEST_SAMPLES:
        return Inferred(None, f"{how}: {len(seen)} samples are too few for a share (fewer than "
                              f"{FEWEST_SAMPLES} read only 0, 1/2 or 1)")
    if any(g.preempted_share for g in scrapes):
        how += (" (a sample after a preemption with room seen counts for the share of its time the "
                "preemptions say the cache was full: vLLM preempts only when it cannot allocate a "
                "KV block)")
    return Inferred(sum(seen) / len(seen), how)


def kv_wall(preempted: float | None, finished: float | None, samples: list[Gauges],
            queued_past_first_bucket: bool, kind: str) -> Inferred | None:
    """Preemptions (SGLang: retractions) in the window per request finished in it, where requests
    queued: the KV wall, read from counters, so from a window of any length and whatever the usage
    at the scrapes. vLLM V1 preempts a running request only when it cannot allocate it a block, and
    SGLang retracts a decoding one only when its token pool cannot hold the next step: either way
    the pool ran out, and while it is out no waiting request is admitted. "Queued": a sample found
    requests waiting, the queue grew across the window, or the queue-time histogram holds waits
    past its first bucket. None where the counters are not published or nothing queued."""
    if preempted is None or finished is None:
        return None
    waiting = [g.waiting for g in samples if g.waiting is not None]
    grew = len(waiting) > 1 and waiting[-1] > waiting[0]
    if not (any(w > 0 for w in waiting) or grew or queued_past_first_bucket):
        return None
    what = "retractions" if kind == "sglang" else "preemptions"
    why = ("SGLang retracts a decoding request only when its token pool cannot hold the next step"
           if kind == "sglang" else "vLLM preempts a running request only when it cannot allocate "
           "it a KV block")
    per_request = preempted / max(finished, 1.0)
    return Inferred(per_request, f"{preempted:.0f} {what} in the window against {finished:.0f} "
                                 f"requests finished ({per_request:.3g} each), with requests "
                                 f"queued: {why}, so the pool ran out")


def _full_while_pressed(before: Gauges, g: Gauges) -> float | None:
    """How much of a sample (against the one before) found the KV cache full while requests were
    pressed: all of it where its usage left no room while requests waited or were preempted, else
    the share of its time a preemption says it was (vLLM); None where neither the usage nor what
    pressed is published."""
    # preempted since the sample before: pressed, and full for that share at least
    if g.preempted_share:
        return full_share(g)
    preempted = (None if g.preemptions is None or before.preemptions is None
                 else g.preemptions > before.preemptions)
    if g.kv_ratio is None or (g.waiting is None and preempted is None):
        return None
    return float(_no_room(g) and ((g.waiting or 0) > 0 or bool(preempted)))


def held_tokens(counted: Counted) -> float | None:
    """Tokens in the requests now running, by bookkeeping on the engine's own counts: every prompt
    counted (once, at its first token) and every token generated, less the prompt and output lengths
    of the requests that finished (their histograms' sums); plus, for the running requests still in
    their prefill (running less those past their first token and not finished: the TTFT and e2e
    histograms' counts), half a prompt each, as far as a chunked prefill has got on average: a
    prompt found in its prefill, which is longer than a mean prompt (a long prompt spends longer in
    prefill: `prompt_in_prefill`). Before any request finished (the counts say 0), the finished sums
    are 0 whether published or not, and a prompt in prefill is as long as the prompts counted so
    far; with no prompt counted either, not known (None).

    The bookkeeping drifts over a server's life: a request that got its first token and never
    finished (aborted, timed out) stays counted for ever. So it is bounded by what is running
    now: nothing when no request runs, and, once more requests are past their first token and
    unfinished than run (drifted), at most the running requests times the longest request
    finished (its prompt and output histograms' highest bucket bounds; a mean would not do: the
    requests running at any moment are the long ones more often than the finished are). Without
    drift that bound is not applied: early in a run the few requests finished are the short ones,
    and the long ones running would be cut to their length. The prompt tokens served from the
    prefix cache (its hit share) sit in blocks shared with other requests: they need no slots of
    their own."""
    c = counted
    if 0 in (c.ended, c.finished_prompts) and not c.ended and not c.finished_prompts:
        # a count published says no request has finished yet: their sums are 0, published yet or not
        c = dataclasses.replace(c, finished_prompt_tokens=c.finished_prompt_tokens or 0.0,
                                finished_generated_tokens=c.finished_generated_tokens or 0.0)
    prompts, generated = c.prompt_tokens, c.generated_tokens
    finished_prompt_tokens, finished_generated = c.finished_prompt_tokens, c.finished_generated_tokens
    if prompts is None or generated is None or finished_prompt_tokens is None or finished_generated is None:
        return None
    running = c.running
    if running is not None and running <= 0:
        return 0.0
    held = max(0.0, prompts + generated - finished_prompt_tokens - finished_generated)
    if running is not None and c.first_tokens is not None and c.ended is not None:
        in_prefill = max(0.0, running - max(0.0, c.first_tokens - c.ended))
        prompt = _prompt_length(c, prompts, finished_prompt_tokens)
        if in_prefill and prompt is None:
            # requests hold prompts of no known length: not judged, rather than read as empty
            return None
        held += in_prefill * (prompt or 0.0) / 2
    # drifted says the running count is known
    if running is not None and drifted(c) and c.longest_request is not None:
        held = min(held, running * c.longest_request)
    if running is not None and c.finished_prompts and c.prefix_hit_share:
        held = max(0.0, held - running * finished_prompt_tokens / c.finished_prompts * c.prefix_hit_share)
    return held


def _prompt_length(c: Counted, prompt_tokens: float, finished_prompt_tokens: float) -> float | None:
    """The length of a prompt found in its prefill: length-weighted over the finished prompts, or
    their mean; before any request finished, the mean of the prompts counted at their first token
    (c's token sums, known)."""
    if c.prompt_in_prefill:
        return c.prompt_in_prefill
    if c.finished_prompts:
        return finished_prompt_tokens / c.finished_prompts
    return prompt_tokens / c.first_tokens if c.first_tokens else None


def drifted(c: Counted) -> bool:
    """Whether the counts hold requests that got their first token and will never finish: more
    requests past their first token and unfinished than are running."""
    running, first_tokens, ended = c.running, c.first_tokens, c.ended
    return running is not None and first_tokens is not None and ended is not None and first_tokens - ended > running


@dataclass(frozen=True, slots=True)
class Counted:
    """An engine's cumulative counts at one scrape, as `held_tokens` reads them; None: not
    published."""
    # prompt tokens counted (at each request's first token)
    prompt_tokens: float | None = None
    generated_tokens: float | None = None
    # the prompt lengths of the requests finished (a histogram's sum)
    finished_prompt_tokens: float | None = None
    finished_generated_tokens: float | None = None
    finished_prompts: float | None = None         # ... and how many (its count)
    running: float | None = None
    # requests past their first token (the TTFT histogram's count)
    first_tokens: float | None = None
    ended: float | None = None                    # requests finished (the e2e histogram's count)
    # prompt tokens found in the prefix cache / prompt tokens queried
    prefix_hit_share: float | None = None
    # tokens: no finished request had more prompt, nor more output
    longest_request: float | None = None
    # the mean prompt, weighted by its length (length_biased_mean)
    prompt_in_prefill: float | None = None


def step_period(span: float, steps: int | None) -> float | None:
    """The mean time between steps: what a request arriving mid-step waits for any scheduler (the
    hooks' `step_boundary`, which is no stage's fault)."""
    return span / steps if steps and span > 0 else None


def decided_waits(timelines: list[RequestTimeline], period: float, longest_step: float | None = None) -> list[float]:
    """Each request's queue time that its scheduler decided, from the step boundaries the spans
    show.

    A request arriving mid-step waits for the step in progress (the hooks' `step_boundary`, no
    stage's fault), and how long that step ran is not published: the inter-token P99 bounds it
    too loosely on a noisy host, where arrivals meet the one step in a hundred that ran long.
    What the spans do show is when steps began or ended: each request's first scheduling, first
    token and end. A request not scheduled at such a moment after its arrival was held back from
    there on. The moment must come half a step period before its own scheduling: the end of the
    step in progress is recorded a little before the next step schedules it. Whatever the spans
    show, a wait past the longest step seen (`longest_step`: ordinary_step_bounds, the top of the
    inter-token latencies' longest bucket) was decided: no step in progress runs longer than
    every step. One request held alone is no pattern (sustained_p99). A short request's wait
    behind a long prompt's prefill, running when it arrived and over by its scheduling, is
    decided whole, as the hooks judge head-of-line blocking: chunked prefill would have let it
    in; the end of such a prefill is no boundary it was held at."""
    slack = period / 2
    longs = _long_prefills(timelines)
    long_starts = [start for start, _ in longs]
    # the latest end of those begun
    long_reach = list(itertools.accumulate((end for _, end in longs), max))
    long_ends = sorted(end for _, end in longs)
    marks = sorted((t, tl.request_id) for tl in timelines for t in _step_moments(tl)
                   if not _within(long_ends, t, slack))
    times = [t for t, _ in marks]
    out = []
    for tl in timelines:
        scheduled = tl.arrival + tl.scheduler_wait_s
        begun = bisect.bisect_right(long_starts, tl.arrival)
        if (tl.prompt_tokens <= LONG_PREFILL_TOKENS and begun
                and tl.arrival < long_reach[begun - 1] <= scheduled + slack):
            out.append(tl.scheduler_wait_s)
            continue
        seen = range(bisect.bisect_right(times, tl.arrival),
                     bisect.bisect_left(times, scheduled - slack))
        first = next((times[i] for i in seen if marks[i][1] != tl.request_id), None)
        past_any_step = tl.scheduler_wait_s - longest_step if longest_step is not None else 0.0
        out.append(max(scheduled - first if first is not None else 0.0, past_any_step, 0.0))
    return out


def _step_moments(tl: RequestTimeline) -> list[float]:
    """When a step began (its first scheduling) or ended (its first token, its end), as its span
    shows."""
    return [t for t in (tl.arrival + tl.scheduler_wait_s, tl.first_token, tl.finished) if t is not None]


def _within(ordered: list[float], t: float, slack: float) -> bool:
    """Whether a value of `ordered` lies within `slack` of `t`."""
    i = bisect.bisect_left(ordered, t - slack)
    return i < len(ordered) and ordered[i] <= t + slack


def ordinary_step_bounds(inter_token: HistogramDelta | None, timelines: list[RequestTimeline],
                         iterations: HistogramDelta | None = None) -> tuple[float | None, float | None]:
    """How long the step in progress at a request's arrival is, from the ordinary steps
    (ordinary_steps), read once a scrape: (typically at most: their P99 by count, a working bound
    never reported (weighted by time, the one or two stalls left in would bound every wait); at
    most: the top of the longest one's bucket, None where that is +Inf). (None, None) where
    nothing was observed."""
    ordinary = ordinary_steps(inter_token, timelines, iterations)
    if ordinary is None:
        return None, None
    longest = next(bound for bound, cumulative in ordinary.buckets if cumulative >= ordinary.count)
    return quantile_interpolated(ordinary, 0.99), None if math.isinf(longest) else longest


def ordinary_steps(inter_token: HistogramDelta | None, timelines: list[RequestTimeline],
                   iterations: HistogramDelta | None = None) -> HistogramDelta | None:
    """The steps a request may arrive in, from the inter-token latencies (a decoding request waits
    one step between tokens, so every step with one running shows there).

    Without the stalls of long prompts prefilled in one step: every request decoding through one
    waited the whole prefill for its next token, so the observations from the bucket of the
    shortest long prefill in the spans up are taken as such stalls and left out (the spans cannot
    count the decoders still running), and a wait behind a long prefill stays the scheduler's
    (head-of-line blocking) however often the long prefills stall decoding. A prefill chunked
    over several steps is longer than any of its steps: leaving out what is longer than it leaves
    every ordinary step in. The spans of long prompts still decoding are not in yet: the steps of
    over LONG_STEP_TOKENS (`iterations`, the tokens-per-step histogram) say what share of the
    steps were such prefills, and that share of the longest observations is left out too."""
    if inter_token is None or inter_token.count <= 0:
        return None
    bounds = [b for b, _ in inter_token.buckets]
    cumulative = [c for _, c in inter_token.buckets]
    per_bucket = [c - below for c, below in zip(cumulative, [0.0, *cumulative[:-1]], strict=True)]
    shortest = min((end - start for start, end in _long_prefills(timelines)), default=None)
    if shortest is not None:
        stalls = bisect.bisect_left(bounds, shortest)
        per_bucket = per_bucket[:stalls] + [0.0] * (len(per_bucket) - stalls)
    stalled = _long_step_share(iterations) * inter_token.count
    for i in reversed(range(len(per_bucket))):        # the longest first
        taken = min(stalled, per_bucket[i])
        per_bucket[i] -= taken
        stalled -= taken
    left = list(itertools.accumulate(per_bucket))
    if left[-1] <= 0:
        return None
    return HistogramDelta(buckets=list(zip(bounds, left, strict=True)), count=left[-1], sum=0.0)


def _long_step_share(iterations: HistogramDelta | None) -> float:
    """The share of the window's steps that scheduled over LONG_STEP_TOKENS tokens."""
    if iterations is None or iterations.count <= 0:
        return 0.0
    upto = [c for bound, c in iterations.buckets if bound <= LONG_STEP_TOKENS]
    return max(0.0, iterations.count - (upto[-1] if upto else 0.0)) / iterations.count


def _long_prefills(timelines: list[RequestTimeline]) -> list[tuple[float, float]]:
    """(start, end) of every prefill of a prompt over LONG_PREFILL_TOKENS, by start."""
    return sorted((c.start, c.end) for tl in timelines if tl.prompt_tokens > LONG_PREFILL_TOKENS for c in tl.chunks)


def sustained_p99(values: list[float]) -> float:
    """The P99 of `values`, reached by at least two of them: one request kept waiting while every
    other went through (a host that stalled the engine once, a span whose step in progress is not
    in the window yet) is not a scheduler's pattern; a scheduler that holds requests back holds
    back several."""
    if len(values) < 2:
        return 0.0
    p99 = percentile(values, 99)
    assert p99 is not None   # two values at least
    return min(p99, sorted(values)[-2])


def queued_mean_wait(by_reason: dict[str, float] | None, admitted: float | None,
                     waiting_now: float | None) -> tuple[float, int] | None:
    """(mean seconds, requests) that the requests queued for the scheduler in the window spent
    queued in it, by Little's law: the window's `queued` seconds (wait_seconds_by_reason: not for
    KV blocks, not deferred for a model) over every request that was in the queue in it, those
    that left it (`admitted`: the most of the first tokens and the queue times observed) and
    those still in it (`waiting_now`). It needs no request to finish, when a queue that hardly
    moves holds every span back; a mean, so at most the P99 it stands in for. None when not
    published or no request queued."""
    if not by_reason or QUEUED not in by_reason or admitted is None or waiting_now is None:
        return None
    requests = round(admitted + waiting_now)
    return (by_reason[QUEUED] / requests, requests) if requests > 0 else None


def decided_wait_p99(timelines: list[RequestTimeline], period: float | None, ordinary_step: float | None = None,
                     queued: tuple[float, int] | None = None, longest_step: float | None = None,
                     waiting_now: float | None = None) -> Inferred[float] | WaitBounds | None:
    """The P99 of the wait the scheduler decided, from the requests' spans when the agent
    receives them (the P99 that at least two requests reach: sustained_p99); without them only
    bounds are known (agent.sources.inference.wait_bounds). Spans tell of a request only when it
    ends: the mean time queued in the window (`queued`, queued_mean_wait, over two requests at
    least) less the step in progress (at most the longer of `period` and `ordinary_step`:
    ordinary_step_bounds) bounds it from below. Where that bound is past what fewer than
    MIN_FINISHED finished requests show while requests still wait (`waiting_now`), those waiting
    wait longer than the few that finished: the P99 is known only from below (WaitBounds, no
    upper bound)."""
    found = _finished_wait_p99(timelines, period, longest_step, waiting_now)
    if queued is None or queued[1] < 2 or period is None:
        return found
    step = max(period, ordinary_step or 0.0)
    bound = queued[0] - step
    if bound <= 0 or (found is not None and found.value >= bound):
        return found
    how = (f"{queued[1]} requests were queued in the window for {queued[0]:.2f} s on average "
           f"(num_requests_waiting by Little's law, less KV and model waits) less the step in "
           f"progress ({_ms(step)}): at least that"
           + (f"; {found.how}" if found is not None else ""))
    if len(timelines) < MIN_FINISHED and waiting_now:
        return WaitBounds(bound, None, how)
    return Inferred(bound, how)


def _finished_wait_p99(timelines: list[RequestTimeline], period: float | None, longest: float | None,
                       waiting_now: float | None = None) -> Inferred[float] | None:
    if not timelines or period is None:
        return None
    value = sustained_p99(decided_waits(timelines, period, longest))
    few = (f"; only {len(timelines)} requests finished in the window while {waiting_now:.0f} wait: "
           f"the P99 of those "
           f"{len(timelines)}, not of "
           f"the queue" if len(timelines) < MIN_FINISHED and waiting_now else "")
    return Inferred(value, f"P99 (reached by two requests at least) over {len(timelines)} "
                           f"requests' time_in_queue (their llm_request spans) from the first step "
                           f"boundary their spans show after each one's arrival (a request's "
                           f"scheduling, first token or end; one step period is "
                           f"{period * 1000:.0f} ms), or past the longest step ({_ms(longest)}), "
                           f"whole behind a long prompt's prefill{few}")


def _ms(seconds: float | None) -> str:
    return "unbounded" if seconds is None else f"{seconds * 1000:.0f} ms"


def head_of_line_share(timelines: list[RequestTimeline], period: float | None) -> Inferred | None:
    """The share of short requests' decided wait spent while a long prompt's prefill ran, from
    the spans: each span's prefill interval is known, so a short request's queue time overlapping
    a long one's prefill was spent behind it."""
    if not timelines or period is None:
        return None
    long_prefills = _long_prefills(timelines)
    starts = [start for start, _ in long_prefills]
    longest = max((end - start for start, end in long_prefills), default=0.0)
    short = [tl for tl in timelines if tl.prompt_tokens <= LONG_PREFILL_TOKENS]
    waited = behind = 0.0
    for tl in short:
        for w in tl.waits:
            # only a prefill begun before the wait ended, and at most the longest one before it
            # began, overlaps it
            near = long_prefills[bisect.bisect_left(starts, w.start - longest):bisect.bisect_left(starts, w.end)]
            overlap = sum(max(0.0, min(w.end, end) - max(w.start, start)) for start, end in near)
            waited += max(0.0, w.seconds - period)
            behind += max(0.0, min(overlap, w.seconds) - period)
    if not short:
        return None
    value = behind / waited if waited > 0 else 0.0
    return Inferred(value, f"{behind:.2f} s of {waited:.2f} s that {len(short)} short requests "
                           f"queued (less a step period each) overlapped the prefill of a prompt "
                           f"over {LONG_PREFILL_TOKENS} tokens, from their llm_request spans")


def charge_queued(timelines: list[RequestTimeline], by_reason: dict[str, float] | None,
                  seen: list[Gauges] | tuple = ()) -> list[RequestTimeline]:
    """The timelines with each one's `queued` time split by the mix of waiting reasons, so the
    tail attribution charges it to the stage that held the queue (the spans do not say why a
    request waited): the mix the gauges `seen` (time order; the gauge poll's) found while it
    waited, else the window's `by_reason`. A request that waited through a model load early in a
    run is charged to the load, whatever the latest window holds."""
    window_mix = _mix(by_reason)
    at = [g.at for g in seen]
    out = []
    for tl in timelines:
        tl = dataclasses.replace(tl)
        if tl.finished is not None:
            mix = window_mix
            if tl.waits and seen:
                start, end = min(w.start for w in tl.waits), max(w.end for w in tl.waits)
                during = seen[bisect.bisect_left(at, start):bisect.bisect_right(at, end)]
                found = wait_seconds_by_reason(list(during), end - start) if during else None
                mix = _mix(found.value) if found is not None else window_mix
            tl.ttft_components = _split(components(tl, tl.first_token or tl.finished), mix)
            tl.latency_components = _split(components(tl, tl.finished), mix)
        out.append(tl)
    return out


def _mix(by_reason: dict[str, float] | None) -> dict[str, float]:
    """The reasons that held requests, each as its share."""
    held = {k: v for k, v in (by_reason or {}).items() if v > 0}
    total = sum(held.values())
    return {k: v / total for k, v in held.items()}


def _split(parts: dict[str, float], mix: dict[str, float]) -> dict[str, float]:
    queued = parts.pop(QUEUED, 0.0)
    if queued and mix:
        for reason, share in mix.items():
            parts[reason] = parts.get(reason, 0.0) + queued * share
    elif queued:
        parts[QUEUED] = queued
    return parts
