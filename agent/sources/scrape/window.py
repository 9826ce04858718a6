"""One scrape window of an engine read from its `/metrics`, and the pure builders of the engine
snapshot's parts over it.

A window is the scrape now and the one it is read against (`before`; None at the first scrape),
the gauges sampled in between (the scrapes' and the gauge poll's, in time order, each marked
against the one before), the requests the engine's spans say finished in it and the KV cache's
size. Each builder takes the window and returns one part of the snapshot, with how its inferred
figures were read (the snapshot's `inferred`, by path); the scheduler's part is scheduler.py's.
The source (engine_source.py) keeps what lasts from one window to the next (a step outlasting the
scrapes, the KV events subscribed to) and puts the parts together.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stagelens.engine_hooks.records.attribution import tail as attribution_tail
from stagelens.engine_hooks.records.snapshot import (
    ColdPathFigures,
    Counters,
    EngineInfo,
    Health,
    KvFigures,
    KvUsage,
    WindowTail,
)
from stagelens.sources.inference.figures import (
    Counted,
    Gauges,
    Inferred,
    KvCapacity,
    charge_queued,
    fragmentation,
    full_while_waiting,
    held_tokens,
    kv_wall,
    mark_preemptions,
    pinned_batch,
)
from stagelens.sources.scrape.families import (
    HistogramDelta,
    by_label,
    counter_delta,
    highest_bound,
    histogram_delta,
    histogram_part,
    label,
    length_biased_mean,
    mean,
    quantile,
    quantile_said,
    total,
    values,
)
from stagelens.sources.scrape.gauge_poll import POLL_S
from stagelens.sources.scrape.prometheus_text import Exposition, Family

if TYPE_CHECKING:
    from stagelens.sources.kv_events.subscriber import KvEventFigures

FINISHED_OK = ("stop", "length")      # vLLM's finished_reason values that are successes


@dataclass(frozen=True, slots=True)
class Scrape:
    """One scrape: when (monotonic seconds), its families, its gauges as the source reads them."""
    at: float
    exposition: Exposition
    gauges: Gauges


@dataclass(frozen=True, slots=True)
class ScrapeWindow:
    """The scrape `now` read against `before` (None: no window yet, at the first scrape or after a
    clock that did not advance). `names` gives each figure's families (newest name first) for the
    engine's `kind`."""
    kind: str
    names: Mapping[str, tuple[str, ...]]
    now: Scrape
    before: Scrape | None
    # every sample in time order, each marked against the one before: `before`'s first, if any
    samples: list[Gauges]
    # the window's samples: `samples` without `before`'s
    gauges: list[Gauges]
    capacity: KvCapacity | None
    # the requests the spans say finished in the window; `with_spans`: the source is given spans
    timelines: list = field(default_factory=list)
    lengths: list[int] | None = None
    with_spans: bool = False

    @property
    def span(self) -> float:
        """The window's seconds; 0 without `before`."""
        return self.now.at - self.before.at if self.before else 0.0

    def family(self, figure: str) -> Family | None:
        """The figure's family in the scrape now."""
        return self.now.exposition.first(self.names[figure])

    def family_before(self, figure: str) -> Family | None:
        return self.before.exposition.first(self.names[figure]) if self.before else None

    def delta_total(self, figure: str) -> float | None:
        """A counter's increase over the window (a reset counts from zero)."""
        return counter_delta(self.family(figure), self.family_before(figure))

    def histogram(self, figure: str) -> HistogramDelta | None:
        """A histogram's observations in the window."""
        return histogram_delta(self.family(figure), self.family_before(figure))


def scrape_window(kind: str, names: Mapping[str, tuple[str, ...]],
                  now: Scrape, before: Scrape | None, scrapes: list[Scrape],
                  polls: list[Gauges] | None, capacity: KvCapacity | None,
                  timelines: list | None = None, lengths: list[int] | None = None,
                  with_spans: bool = False) -> ScrapeWindow:
    """The window from the scrapes kept after `before` (`now` last) and the gauge polls between
    `before` and `now` (None: no gauge poll), merged in time order and marked against each other."""
    gauges = [s.gauges for s in scrapes]
    if polls is not None and before is not None:
        gauges = sorted(gauges + polls, key=lambda g: g.at)
    samples = marked(kind, ([before.gauges] if before else []) + gauges)
    return ScrapeWindow(kind=kind, names=names, now=now, before=before, samples=samples,
                        gauges=samples[1:] if before else samples, capacity=capacity,
                        timelines=timelines or [], lengths=lengths, with_spans=with_spans)


def marked(kind: str, samples: list[Gauges]) -> list[Gauges]:
    """The samples (in time order) with what vLLM's preemptions say of its KV cache between them
    (SGLang's retractions are not read so: agent.sources.inference.figures.mark_preemptions says
    why)."""
    return mark_preemptions(samples, per_preemption_s=POLL_S) if kind == "vllm" else samples


def gauges_of(ex: Exposition, names: Mapping[str, tuple[str, ...]], at: float) -> Gauges:
    """One scrape's (or poll's) gauges, the tokens the running requests hold among them."""
    def family(figure: str) -> Family | None:
        return ex.first(names[figure])

    reasons = by_label(family("waiting_by_reason"), "reason") or {}
    prompts, outputs = family("request_prompt_tokens"), family("request_generation_tokens")
    running = total(family("running"))
    held = held_tokens(Counted(
        prompt_tokens=total(family("prompt_tokens")),
        generated_tokens=total(family("generation_tokens")),
        finished_prompt_tokens=histogram_part(prompts, "_sum"),
        finished_prompts=histogram_part(prompts, "_count"),
        finished_generated_tokens=histogram_part(outputs, "_sum"),
        running=running, first_tokens=histogram_part(family("ttft"), "_count"),
        ended=histogram_part(family("e2e"), "_count"),
        longest_request=_sum_or_none(highest_bound(prompts), highest_bound(outputs)),
        prompt_in_prefill=length_biased_mean(prompts),
        prefix_hit_share=_share(total(family("prefix_hits")), total(family("prefix_queries")))))
    return Gauges(at=at, running=running, held_tokens=held, waiting=total(family("waiting")),
                  deferred=reasons.get("deferred"), kv_ratio=mean(family("kv_usage")),
                  adapters=_serves_adapters(family("lora")),
                  preemptions=total(family("preemptions")))


def infer(inferred: dict[str, str], path: str, found: Inferred | None):
    """The value found, how it was read written into `inferred` at `path`; None where nothing
    was."""
    if found is None:
        return None
    inferred[path] = found.how
    return found.value


# --- the KV cache -----------------------------------------------------------------------------
def kv_capacity(ex: Exposition, kind: str, names: Mapping[str, tuple[str, ...]],
                generation: str) -> KvCapacity | None:
    """The KV cache's size: vLLM's cache_config_info (kv_cache_size_tokens where published: a hybrid
    model's blocks do not hold block_size tokens each), SGLang's token pool (a block of one
    token)."""
    if kind == "vllm":
        v1 = not generation.startswith("vLLM V0")
        return _cache_config(ex.first(names["cache_config"]), v1=v1)
    tokens = total(ex.first(names["kv_tokens_capacity"]))
    if tokens is None:   # SGLang 0.4 publishes the tokens in use and their share
        used, ratio = total(ex.first(names["kv_tokens_used"])), mean(ex.first(names["kv_usage"]))
        tokens = used / ratio if used and ratio else None
    if not tokens:
        return None
    return KvCapacity(num_blocks=round(tokens), tokens=round(tokens), block_size=1)


def kv_usage(w: ScrapeWindow) -> KvUsage | None:
    """The KV cache's blocks and those in use now (its usage ratio of them); None without its
    size."""
    if w.capacity is None:
        return None
    ratio = w.now.gauges.kv_ratio
    used = None if ratio is None else round(ratio * w.capacity.num_blocks)
    return KvUsage(num_blocks=w.capacity.num_blocks, used_blocks=used)


def kv_figures(w: ScrapeWindow, blocks: KvEventFigures | None = None,
               ) -> tuple[KvFigures, dict[str, str]]:
    """The window's KV figures: fragmentation and full-while-waiting from the gauges, the requests'
    lengths, and, with the engine's KV events (`blocks`: the window's), blocks stored, removed,
    restored and their lifetime."""
    inferred: dict[str, str] = {}
    kv = KvFigures(
        fragmentation_ratio=infer(inferred, "window.kv.fragmentation_ratio",
                                  fragmentation(w.gauges, w.capacity)),
        full_while_waiting_share=infer(inferred, "window.kv.full_while_waiting_share",
                                       full_while_waiting(w.samples)),
        preemptions_per_request=infer(inferred, "window.kv.preemptions_per_request",
                                      _kv_wall(w)),
        tokens_per_request=infer(inferred, "window.kv.tokens_per_request", request_tokens(w)),
        most_running=whole(max((g.running for g in w.samples if g.running is not None),
                               default=None)),
        prefix_hit_share=_prefix_hit_share(w),
        sequence_lengths=w.lengths)
    if blocks is not None:
        kv.blocks_stored, kv.blocks_removed = blocks.blocks_stored, blocks.blocks_removed
        kv.blocks_restored, kv.block_lifetime_p50_s = blocks.restored_blocks, blocks.lifetime_p50_s
    return kv, inferred


def _kv_wall(w: ScrapeWindow) -> Inferred | None:
    """The window's preemptions per request finished, where requests queued (figures.kv_wall)."""
    if w.before is None:
        return None
    queue = w.histogram("queue_time")
    past_first = queue is not None and bool(queue.buckets) and queue.count > queue.buckets[0][1]
    return kv_wall(w.delta_total("preemptions"), _finished_in(w), w.samples, past_first, w.kind)


def _finished_in(w: ScrapeWindow) -> float | None:
    """The requests finished in the window: the e2e histogram's count, else the success counter."""
    e2e = w.histogram("e2e")
    return e2e.count if e2e is not None else w.delta_total("finished")


def _prefix_hit_share(w: ScrapeWindow) -> float | None:
    """The prompt tokens the prefix cache served in the window over those it was asked for; None
    where it was asked for none (caching off, or no prompt)."""
    hits, queries = w.delta_total("prefix_hits"), w.delta_total("prefix_queries")
    return min(1.0, hits / queries) if hits is not None and queries else None


def request_tokens(w: ScrapeWindow) -> Inferred | None:
    """The KV tokens a request holds at its end, on average over the window's finished requests:
    its prompt and output (vLLM's request histograms' sums, else the token counters over the
    requests finished), less the prompt share found in the prefix cache, whose blocks are shared."""
    prompts = w.histogram("request_prompt_tokens")
    outputs = w.histogram("request_generation_tokens")
    finished = _finished_in(w)
    prompt, output = w.delta_total("prompt_tokens"), w.delta_total("generation_tokens")
    said = "the prompt and generation token counters"
    if prompts is not None and outputs is not None and prompts.count > 0:
        finished, prompt, output = prompts.count, prompts.sum, outputs.sum
        said = "the request prompt and generation histograms' sums"
    if not finished or prompt is None or output is None:
        return None
    shared = _prefix_hit_share(w) or 0.0
    per_request = (prompt * (1 - shared) + output) / finished
    less = f", less the {shared:.0%} of prompt tokens found in the prefix cache" if shared else ""
    return Inferred(per_request,
                    f"{per_request:,.0f} tokens a request: {prompt / finished:,.0f} of prompt and "
                    f"{output / finished:,.0f} of output over the {finished:,.0f} requests "
                    f"finished in the window ({said}){less}")


# --- the rest of the snapshot -----------------------------------------------------------------
def cold_path(w: ScrapeWindow) -> ColdPathFigures:
    """Requests waiting on a model (vLLM's `deferred` waits), where the engine serves adapters to
    load."""
    g = w.now.gauges
    return ColdPathFigures(waiting_on_model=whole(g.deferred) if g.adapters else None)


def window_tail(w: ScrapeWindow, by_reason: dict[str, float] | None,
                polled: list[Gauges]) -> tuple[WindowTail | None, dict[str, str]]:
    """The tail of the window's requests by component, from their spans, their queue time charged by
    the mix of waiting reasons (the polls' while each waited, else the window's); None without
    spans."""
    if not w.timelines:
        return None, {}
    charged = charge_queued(w.timelines, by_reason, polled)
    tail = WindowTail(ttft=attribution_tail(charged, "ttft"),
                      latency=attribution_tail(charged, "latency"))
    return tail, {"window.tail": f"{len(charged)} requests' llm_request spans: queue, prefill and "
                                 f"decode; their queue time charged by the window's mix of waiting "
                                 f"reasons"}


def counters_and_health(w: ScrapeWindow) -> tuple[Counters, Health | None]:
    """Preemptions and requests finished and failed since the engine started; how they finished, by
    reason."""
    finish_reasons = by_label(w.family("finished"), "finished_reason")
    succeeded = failed = health = None
    if finish_reasons is not None:
        succeeded = sum(v for k, v in finish_reasons.items() if k in FINISHED_OK)
        failed = sum(finish_reasons.values()) - succeeded
        health = Health(finish_reasons={k: int(v) for k, v in finish_reasons.items()})
    return Counters(preemptions_total=total(w.family("preemptions")),
                    requests_finished_total=succeeded, requests_failed_total=failed), health


def engine_info(w: ScrapeWindow, generation: str | None,
                model: str | None) -> tuple[EngineInfo, dict[str, str]]:
    """The engine: its kind and names' generation, model, KV cache (size, block size, the flag that
    set it) and the batch its queue shows pinned (max_num_seqs)."""
    inferred: dict[str, str] = {}
    c = w.capacity
    return EngineInfo(
        source=w.kind, generation=generation, model=model, allocator="paged",
        block_size=None if c is None or w.kind == "sglang" else c.block_size,
        kv_capacity_tokens=None if c is None else c.tokens,
        kv_capacity_lever=None if c is None else c.lever,
        max_num_seqs=infer(inferred, "engine.max_num_seqs", pinned_batch(w.gauges)),
        block_size_forced=None if c is None else c.forced_block_size,
        enable_prefix_caching=None if c is None else c.prefix_caching), inferred


@dataclass(frozen=True, slots=True)
class Reading:
    """What the scrape tells beyond the snapshot's fields (None: not observable, or no data in the
    window). A quantile the buckets cannot place is None, and its `said` text gives the bound ("<
    0.3 s", ">= 30 s")."""
    kv_usage_ratio: float | None = None
    kv_capacity_tokens: float | None = None
    waiting_by_reason: dict[str, float] | None = None
    preemptions_in_window: float | None = None
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    inter_token_p50_s: float | None = None
    inter_token_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None
    # "ttft_p99" -> ">= 30 s", as far as the buckets place each quantile
    said: dict[str, str] | None = None


def reading(w: ScrapeWindow) -> Reading:
    """The window's latency quantiles (and the bounds the buckets say of those they cannot place),
    the KV usage now, the queue by reason now and the preemptions in the window."""
    ttft, itl, e2e = w.histogram("ttft"), w.histogram("inter_token"), w.histogram("e2e")
    quantiles = {f"{name}_{q}": (h, level)
                 for name, h in (("ttft", ttft), ("inter_token", itl), ("e2e", e2e))
                 for q, level in (("p50", 0.50), ("p99", 0.99))}
    said = {k: t for k, (h, level) in quantiles.items()
            if (t := quantile_said(h, level)) is not None}
    return Reading(
        kv_usage_ratio=w.now.gauges.kv_ratio,
        kv_capacity_tokens=None if w.capacity is None else w.capacity.tokens,
        waiting_by_reason=by_label(w.family("waiting_by_reason"), "reason"),
        preemptions_in_window=w.delta_total("preemptions"),
        ttft_p50_s=quantile(ttft, 0.50), ttft_p99_s=quantile(ttft, 0.99),
        inter_token_p50_s=quantile(itl, 0.50), inter_token_p99_s=quantile(itl, 0.99),
        e2e_p50_s=quantile(e2e, 0.50), e2e_p99_s=quantile(e2e, 0.99), said=said or None)


# --- reading families -------------------------------------------------------------------------
def _cache_config(family: Family | None, v1: bool) -> KvCapacity | None:
    """The KV cache's size from vLLM's cache_config_info labels, over all engines: blocks, the
    tokens they hold (kv_cache_size_tokens where published, else blocks x block size), V1's
    reserved null block per engine, and whether the model forced the block size (a hybrid model:
    its tokens are not blocks x block size, or a mamba block size is published)."""
    samples = values(family)
    sizes = {size for s in samples if (size := _int(s.labels.get("block_size"))) is not None}
    blocks = _every_int(samples, "num_gpu_blocks")
    if len(sizes) != 1 or not blocks:
        return None
    block_size, num_blocks = sizes.pop(), sum(blocks)
    published = _every_int(samples, "kv_cache_size_tokens")
    tokens = sum(published) if published is not None else num_blocks * block_size
    mamba = any(_int(s.labels.get("mamba_block_size")) for s in samples)
    forced = tokens != num_blocks * block_size or mamba
    return KvCapacity(num_blocks=num_blocks, tokens=tokens, block_size=block_size,
                      reserved_blocks=len(samples) if v1 else 0, forced_block_size=forced,
                      lever=_capacity_lever(samples[0].labels),
                      prefix_caching=_flag(samples[0].labels.get("enable_prefix_caching")))


def _every_int(samples: list, name: str) -> list[int] | None:
    """Each sample's label `name` as a whole number above 0 (_int); None where one has none."""
    found = [_int(s.labels.get(name)) for s in samples]
    return [v for v in found if v is not None] if None not in found else None


def _capacity_lever(labels: dict[str, str]) -> str:
    """The vLLM flag that set the KV cache's size, with its value: a block count forced by
    --num-gpu-blocks-override outranks a memory size (--kv-cache-memory-bytes; a CPU build's
    VLLM_CPU_KVCACHE_SPACE shows there too), which outranks the share of device memory."""
    override = _int(labels.get("num_gpu_blocks_override"))
    if override:
        return f"--num-gpu-blocks-override {override}"
    memory = _int(labels.get("kv_cache_memory_bytes"))
    if memory:
        return f"--kv-cache-memory-bytes {memory}"
    return f"--gpu-memory-utilization {labels.get('gpu_memory_utilization') or '0.9'}"


def _serves_adapters(family: Family | None) -> bool:
    """Whether vLLM serves LoRA adapters: lora_requests_info's max_lora above 0 (it publishes "0"
    without)."""
    return bool(_int(label(family, "max_lora")))


def _sum_or_none(*parts: float | None) -> float | None:
    known = [p for p in parts if p is not None and not math.isinf(p)]
    return sum(known) if len(known) == len(parts) else None


def _share(part: float | None, whole: float | None) -> float | None:
    return min(1.0, part / whole) if part is not None and whole else None


def _flag(text: str | None) -> bool | None:
    """A label's Python boolean ("True", "False"); None for anything else."""
    return {"True": True, "False": False}.get(text or "")


def _int(text) -> int | None:
    try:
        value = int(text)
    except (TypeError, ValueError):
        return None     # "None" before the KV cache is profiled
    return value if value > 0 else None


def per_s(amount: float | None, span: float) -> float | None:
    return amount / span if amount is not None and span > 0 else None


def whole(value: float | None) -> int | None:
    return None if value is None else round(value)
