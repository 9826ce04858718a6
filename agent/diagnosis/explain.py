"""One sentence with the numbers, and recommendations that name flags and values, for each stage."""

from __future__ import annotations

import math

from stagelens.diagnosis.model import Evidence, Recommendation
from stagelens.diagnosis.recommendation_flags import for_engine
from stagelens.diagnosis.signals import SIGNALS_BY_ID, window_tail
from stagelens.diagnosis.wording import main_wait_reason
from stagelens.engine_hooks.records.snapshot import ColdPathFigures, EngineInfo, KvFigures, SchedulerFigures
from stagelens.engine_hooks.records.timeline import BEHIND_LONG_PREFILL
from stagelens.engine_hooks.records.waits import MAX_NUM_SEQS, TOKEN_BUDGET
from stagelens.fmt import BOUND_MARK
from stagelens.frame import Frame
from stagelens.vocabulary import COLD_PATH, COMPONENT_NAMES, KV_CACHE, SCHEDULER, STAGE_NAMES, stage_of

BLOCK_SIZES = (8, 16, 32, 64, 128)
OUTSIDE = ("vllm", "sglang")
# the signals that say an outside engine's KV pool ran out
KV_WALL_SIGNALS = {"kv_full_while_waiting", "kv_wall_preemptions"}
NO_LEVER = "no lever found in the scrape"
# a batch cap below what the pool holds by the mean request: room for the longer ones
CAP_HEADROOM = 0.05
# vLLM's share of device memory past which nothing is left for activations and the CUDA graphs
MAX_MEMORY_SHARE = 0.95
BLOCK_SIGNALS = {"kv_fragmentation_ratio", "kv_access_efficiency"}   # what a block size changes
TARGET_BLOCK_WASTE = 0.10


def explain(stage: str, state: str, evidence: list[Evidence], frame: Frame | None) -> tuple[str, list[Recommendation]]:
    if state == "unknown":
        return _unknown_sentence(stage, frame), []
    troubled = [e for e in evidence if e.state in ("warn", "firing")]
    ctx = _Context(frame)
    advised = [e for e in troubled if SIGNALS_BY_ID[e.signal].advisory]
    bad = [e for e in troubled if e not in advised]
    sentence, recommendations = _judged(stage, bad, evidence, ctx)
    if advised:
        # checks that never set the stage's state: said after it, each with its lever
        sentence += "; also " + "; ".join(_sentence(e, ctx) for e in advised)
        recommendations += [Recommendation(_sentence(e, ctx)) for e in advised]
    return sentence, recommendations


def _judged(stage: str, bad: list[Evidence], evidence: list[Evidence],
            ctx: _Context) -> tuple[str, list[Recommendation]]:
    """The stage's sentence and recommendations from its troubled evidence (`bad`)."""
    if not bad:
        rows = ", ".join(_fmt_row(e) for e in evidence if e.value is not None and e.applicable)[:200] or "no data"
        unseen = [e.signal for e in evidence if e.provenance == "not observable"]
        engine_seen = any(SIGNALS_BY_ID[e.signal].reads and e.state not in ("unknown", "info") for e in evidence)
        # an engine read from outside: OK says little when only the node was read
        if unseen and not engine_seen:
            return (f"{STAGE_NAMES[stage]} healthy on the node's signals only ({rows}): "
                    f"{', '.join(unseen)} not observable on this engine"), []
        return f"{STAGE_NAMES[stage]} healthy: {rows}", []
    sentences = [_inferred_sentence(e) if e.provenance == "inferred" else _tail_sentence(e, ctx)
                 if e.signal.endswith("_tail_share") else _sentence(e, ctx) for e in bad[:2]]
    return "; ".join(sentences), for_engine(_RECOMMEND[stage](bad, ctx), ctx.cfg.source,
                                            ctx.cfg.kv_capacity_lever)


def _inferred_sentence(e: Evidence) -> str:
    """An engine read from outside: the value and what it was inferred from, not the hooks'
    account of why."""
    return f"{_head(e)}, inferred from {e.how}"


def _sentence(e: Evidence, ctx: _Context) -> str:
    """The value against its threshold, then what the signal says of it (its `says` in the
    SIGNALS table)."""
    says = SIGNALS_BY_ID[e.signal].says
    return _head(e) + (says(e, ctx) if says is not None else "")


def _tail_sentence(e: Evidence, ctx: _Context) -> str:
    return f"{_head(e)}: {ctx.tail.sentence()}" if ctx.tail is not None else _head(e)


def _unknown_sentence(stage: str, frame: Frame | None) -> str:
    if frame is None:
        return "no samples yet"
    if frame.engine is None:
        return f"{STAGE_NAMES[stage]}: no engine is observed and no GPU signal is available"
    return f"{STAGE_NAMES[stage]}: no data for any of its signals"


class _Context:
    """The engine's settings and window figures an explanation refers to."""

    def __init__(self, frame: Frame | None) -> None:
        engine = frame.engine if frame else None
        window = engine.window if engine else None
        self.cfg = engine.engine if engine else EngineInfo()      # every setting None: not known
        self.kv = window.kv if window else KvFigures()
        self.sched = window.scheduler if window else SchedulerFigures()
        self.cold = window.cold_path if window else ColdPathFigures()
        lengths = self.kv.sequence_lengths or []
        self.lengths = lengths
        self.mean_length = sum(lengths) / len(lengths) if lengths else None
        # an engine read from outside does not publish its device: vLLM and SGLang serve on GPUs
        self.device = self.cfg.device or ("cuda" if self.cfg.source in ("vllm", "sglang") else "cpu")
        self.tail = window_tail(frame) if frame is not None else None


def _cmp(e: Evidence) -> str:
    limit = e.firing if e.state == "firing" and e.firing is not None else e.warn
    return f"{'<' if SIGNALS_BY_ID[e.signal].direction == 'below' else '>'} {_fmt_value(limit, e.unit)}"


def _fmt_value(value, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "seconds":
        return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"
    return f"{value:.2f}"


def _fmt_row(e: Evidence) -> str:
    return f"{e.label} {_shown(e)}"


def _head(e: Evidence) -> str:
    return f"{e.label} {_shown(e)} {_cmp(e)}"


def _shown(e: Evidence) -> str:
    """The evidence's value; a bound said as one ("≥ 300 ms")."""
    return BOUND_MARK.get(e.bound, "") + _fmt_value(e.value, e.unit)


# --- KV cache -------------------------------------------------------------------------------------
def _kv_recommend(bad: list[Evidence], ctx: _Context) -> list[Recommendation]:
    cfg = ctx.cfg
    signals = {e.signal for e in bad}
    out = []
    if cfg.allocator == "contiguous":
        out.append(Recommendation("--allocator paged: reserve KV block by block instead of "
                                  "max_model_len per request (PagedAttention took fragmentation "
                                  "from 30% to 12% in the report)",
                                  {"allocator": "paged"}))
    # a hybrid model's block size is not a choice
    elif not cfg.block_size_forced and signals & BLOCK_SIGNALS:
        best = choose_block_size(ctx.lengths, cfg.block_size)
        if best is not None and cfg.block_size is not None and best != cfg.block_size:
            waste_now = block_waste(ctx.lengths, cfg.block_size)
            out.append(Recommendation(
                f"--block-size {best}: over the last {len(ctx.lengths)} requests (mean "
                f"{ctx.mean_length:.0f} tokens) it leaves "
                f"{block_waste(ctx.lengths, best):.0%} of KV slots empty, "
                f"against {waste_now:.0%} at {cfg.block_size}", {"block_size": best}))
    wall = any(e.signal in KV_WALL_SIGNALS for e in bad)
    if wall and cfg.source in OUTSIDE:
        out.extend(pool_advice(ctx))
    elif wall:
        out.append(Recommendation("the KV cache is full while requests queue: give it more memory "
                                  "(--kv-cache-memory), or admit fewer requests at once "
                                  "(--max-num-seqs) so the running ones are not preempted; the "
                                  "queue is its consequence"))
    if any(e.signal in ("preemption_with_free_memory", "kv_cache_tail_share") for e in bad) and cfg.max_num_seqs:
        lower = max(1, cfg.max_num_seqs * 3 // 4)
        out.append(Recommendation(f"--max-num-seqs {lower}: admit fewer requests at once so "
                                  f"running ones are not preempted (or give the cache more memory "
                                  f"with --kv-cache-memory)",
                                  {"max_num_seqs": lower}))
    max_len = cfg.max_model_len or 0
    if max_len > 65536:
        batch = max(1, int(min(8, 32 / (max_len / 4096) ** 0.6)))
        out.append(Recommendation(f"contexts over 64K: FlashAttention-3 and --max-num-seqs {batch} "
                                  f"(the report's min(8, 32 / "
                                  f"(context_len / 4096) ** 0.6))", {"max_num_seqs": batch}))
    return out


def pool_advice(ctx: _Context) -> list[Recommendation]:
    """An outside engine at its KV wall: the pool's arithmetic from its own scrape (its tokens,
    what a request holds, how many ran at once) and the levers it gives, each with the sum; where
    the arithmetic is not published, what is missing."""
    pool, per, most = ctx.cfg.kv_capacity_tokens, ctx.kv.tokens_per_request, ctx.kv.most_running
    if not pool or not per or not most:
        missing = [what for what, known in (("the pool's size (cache_config_info)", pool),
                                            ("the requests' lengths (prompt and generation "
                                             "histograms)", per), ("the running gauge", most))
                   if not known]
        return [Recommendation(f"the KV pool ran out while requests queued; its arithmetic needs "
                               f"{' and '.join(missing)}, which the scrape does not give: give "
                               f"the KV cache more memory or admit fewer requests at once")]
    fits = pool / per
    sums = (f"pool {pool:,} tokens ÷ ~{per:,.0f} a request ≈ {fits:.0f} at once; {most} ran at "
            f"once")
    out = []
    cap = max(1, int(fits * (1 - CAP_HEADROOM)))
    if most > cap:
        out.append(Recommendation(f"--max-num-seqs {cap}: {sums}, so admit at most {cap} (a "
                                  f"{CAP_HEADROOM:.0%} margin for requests longer than the mean) "
                                  f"and none is preempted", {"max_num_seqs": cap}))
    grow = _growth(most * per / pool - 1)
    share = _memory_share(ctx.cfg.kv_capacity_lever)
    if ctx.cfg.source == "sglang":
        out.append(Recommendation(f"raise --mem-fraction-static: {sums}; {grow}"))
    elif share is not None and share < MAX_MEMORY_SHARE:
        target = min(MAX_MEMORY_SHARE, round(share + 0.10, 2))
        out.append(Recommendation(f"--gpu-memory-utilization {target:g} (now {share:g}): {sums}; "
                                  f"{grow}, and it takes all the memory the weights leave, so "
                                  f"{target:g} adds {target - share:.2f} of each GPU's memory "
                                  f"to it"))
    elif share is None and ctx.cfg.kv_capacity_lever:
        # a block count or a memory size set the pool: the flag that set it
        out.append(Recommendation(f"raise {ctx.cfg.kv_capacity_lever} (it sets the pool now): "
                                  f"{sums}; {grow}"))
    if ctx.cfg.enable_prefix_caching is False:
        out.append(Recommendation(f"--enable-prefix-caching: off now; where prompts share long "
                                  f"prefixes (a system prompt, a chat's history) their blocks are "
                                  f"held once, and each request needs fewer than ~{per:,.0f} "
                                  f"tokens of its own (the scrape cannot tell whether they do)"))
    dtype = "fp8_e5m2" if ctx.cfg.source == "sglang" else "fp8"
    out.append(Recommendation(f"--kv-cache-dtype {dtype}: a 16-bit KV cache in 8 bits holds twice "
                              f"the tokens in the same memory, ≈ {2 * fits:.0f} requests of "
                              f"~{per:,.0f} tokens at once ({sums})"))
    return out


def _growth(short: float) -> str:
    """What the pool lacks for the most that ran at once, `short` of it (a share)."""
    if short > 0.05:
        return f"the pool must grow {short:.0%} to hold them all"
    return "at the mean request they just fit, and the longer ones do not"


def _memory_share(lever: str | None) -> float | None:
    """The share of device memory in vLLM's `--gpu-memory-utilization X` lever, if that is it."""
    flag, _, value = (lever or "").partition(" ")
    try:
        return float(value) if flag == "--gpu-memory-utilization" else None
    except ValueError:
        return None


def block_waste(lengths: list[int], block_size: int) -> float:
    """Share of allocated slots left empty if each sequence took whole blocks of `block_size`."""
    allocated = sum(math.ceil(n / block_size) * block_size for n in lengths)
    return (allocated - sum(lengths)) / allocated if allocated else 0.0


def choose_block_size(lengths: list[int], current: int | None) -> int | None:
    """A quick sweep on observed lengths: the largest block (best locality) that wastes at most
    10% of slots."""
    if len(lengths) < 8:
        return None
    fitting = [b for b in BLOCK_SIZES if block_waste(lengths, b) <= TARGET_BLOCK_WASTE]
    return max(fitting) if fitting else min(BLOCK_SIZES)


# --- scheduler ------------------------------------------------------------------------------------
def _consequence(ctx: _Context) -> tuple[str, Recommendation] | None:
    """(the stage, the advice) when most of the window's wait is charged to another stage than
    the scheduler."""
    main = main_wait_reason(ctx)
    if main is None:
        return None
    reason, share = main
    cause = stage_of(reason)
    if cause is None or cause == SCHEDULER:
        return None
    return cause, Recommendation(f"{share:.0%} of the wait is charged to the {STAGE_NAMES[cause]} "
                                 f"stage ({COMPONENT_NAMES[reason]}): the queue is its "
                                 f"consequence; fix that first")


def consequence_advice(frame: Frame | None) -> tuple[str, Recommendation] | None:
    """The scheduler's advice that its queue is another stage's consequence, and that stage: the
    diagnosis keeps it only where that stage is itself in trouble, so the advice never
    contradicts the root."""
    return _consequence(_Context(frame))


def _sched_recommend(bad: list[Evidence], ctx: _Context) -> list[Recommendation]:
    cfg = ctx.cfg
    out = []
    signals = {e.signal for e in bad}
    main = main_wait_reason(ctx)
    chain = _consequence(ctx)
    if chain is not None:
        out.append(chain[1])
    # V1 engines chunk prefills by default: chunking is advised where the evidence shows long
    # prefills in the way, or where it is known to be off (an engine read from outside may not say)
    if "head_of_line_blocking" in signals or cfg.enable_chunked_prefill is False or (
            main and main[0] in (BEHIND_LONG_PREFILL, TOKEN_BUDGET)):
        budget = 8192 if str(ctx.device).startswith("cuda") else 512
        cap = budget // 4
        out.append(Recommendation(
            f"--enable-chunked-prefill --max-num-batched-tokens {budget} "
            f"--long-prefill-token-threshold {cap}: split long prefills so short requests share "
            f"every step (the report: utilisation 65% -> 82%)",
            {"enable_chunked_prefill": True, "max_num_batched_tokens": budget,
             "long_prefill_token_threshold": cap}))
    if "head_of_line_blocking" in signals and cfg.policy != "short-first":
        out.append(Recommendation("--policy short-first: admit short contexts first (the report: P99 swing -35%)",
                                  {"policy": "short-first"}))
    if main and main[0] == MAX_NUM_SEQS and cfg.max_num_seqs:
        out.append(_raise_batch(cfg.max_num_seqs, ctx))
    if not out and cfg.source in OUTSIDE:
        # never the report's profile alone: what was looked for, and what would find more
        out.append(Recommendation(_no_lever_found(ctx)))
    if not out or len(out) == 1 and out[0].text.startswith(NO_LEVER):
        # no lever the evidence points at: the report's profiles
        out.append(Recommendation("for SLA-sensitive serving, the report's conservative profile: "
                                  "batch 8, chunked prefill on (balanced: batch 12; aggressive: "
                                  "batch 16 with FP8, offline only)"))
    return out


def _raise_batch(limit: int, ctx: _Context) -> Recommendation:
    """Twice the batch that holds the queue, within what the KV pool holds where its arithmetic
    is published."""
    more, why = limit * 2, ""
    pool, per = ctx.cfg.kv_capacity_tokens, ctx.kv.tokens_per_request
    if pool and per:
        fits = int(pool / per * (1 - CAP_HEADROOM))
        more = max(limit + 1, min(more, fits))
        why = (f"; the pool holds {pool:,} tokens ÷ ~{per:,.0f} a request ≈ {pool / per:.0f} at "
               f"once, so {more} fit")
    return Recommendation(f"--max-num-seqs {more}: the batch is held at its limit of {limit} while "
                          f"requests wait, and neither the token budget nor the KV cache holds "
                          f"it{why}", {"max_num_seqs": more})


def _no_lever_found(ctx: _Context) -> str:
    """What was checked for an outside engine's queue, and what evidence would find its lever."""
    checked = ["no batch limit held the queue (the running count varied while requests waited)",
               "no preemption said the KV pool ran out"]
    missing = []
    if ctx.tail is None:
        missing.append("the engine's traces (its llm_request spans sent to this agent: "
                       "head-of-line blocking behind long prefills, each request's wait)")
    if ctx.cfg.enable_chunked_prefill is None:
        missing.append("whether chunked prefill is on (not published)")
    said = f"; missing: {'; '.join(missing)}" if missing else ""
    return f"{NO_LEVER}: {', '.join(checked)}{said}"


# --- cold path ------------------------------------------------------------------------------------
def _cold_recommend(bad: list[Evidence], ctx: _Context) -> list[Recommendation]:
    models = ctx.cfg.models or 1
    return [
        Recommendation(f"--num-preload-models {models}: load every served model before traffic and "
                       f"keep it resident (the report: cold-start latency -43% with 2 preloaded)",
                       {"num_preload_models": models, "max_resident_models": models}),
        Recommendation("on Kubernetes, keep hot instances on their nodes: pod anti-affinity by tenant class"),
    ]


_RECOMMEND = {KV_CACHE: _kv_recommend, SCHEDULER: _sched_recommend, COLD_PATH: _cold_recommend}
