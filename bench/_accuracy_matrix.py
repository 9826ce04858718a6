"""The lab configurations the diagnosis is judged on: each stage reached by several different causes,
and healthy runs at several loads, where nothing should fire.

Each entry is `lab` flags over a base, as `stagelens lab` builds them (agent.lab.settings).
The scenarios that already reproduce a stage are taken as they are, so a fact lives in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from stagelens.lab.scenarios import SCENARIOS
from stagelens.vocabulary import COLD_PATH, KV_CACHE, SCHEDULER


@dataclass(frozen=True)
class Case:
    name: str
    expected: str | None      # the root stage the diagnosis should name; None: nothing should fire
    flags: dict               # lab defaults for this case (the bench adds duration and seed)
    why: str


# The healthy scenario without its rate: small model, 2048-token context, 128-token prompts, 16-48 outputs.
BASE = {k: v for k, v in SCENARIOS["healthy"].defaults.items() if k != "rate"}


def _over(**flags) -> dict:
    return {**BASE, **flags}


MATRIX: tuple[Case, ...] = (
    # kv_cache: memory reserved or held that requests cannot use, turning into waits for blocks or preemptions
    Case("kv-fragmentation", KV_CACHE, SCENARIOS["kv-fragmentation"].defaults,
         "contiguous allocator reserves max_model_len per request in 64 MiB: most reserved slots stay empty"),
    Case("kv-chain", KV_CACHE, SCENARIOS["chain"].defaults,
         "contiguous in 48 MiB at rate 2: the waste turns into requests queued for memory"),
    Case("kv-paged-starved", KV_CACHE,
         _over(kv_cache_memory="16MiB", max_num_seqs=32, rate=2.0, output_len="uniform:96:192"),
         "paged, but 16 MiB (~2k tokens) for 32 seats and long outputs: requests wait for blocks or are preempted"),
    Case("kv-huge-blocks", KV_CACHE,
         _over(block_size=512, kv_cache_memory="32MiB", rate=2.0, prompt_len="lognormal:32:0.5",
               output_len="uniform:8:24"),
         "512-token blocks for ~50-token sequences: 8 blocks in 32 MiB, each almost empty, so few requests fit"),
    # scheduler: compute free or batch badly formed while requests wait
    Case("sched-hol-blocking", SCHEDULER, SCENARIOS["hol-blocking"].defaults,
         "no chunked prefill and 20% 1800-token prompts: short requests queue behind long prefills"),
    Case("sched-tiny-batch", SCHEDULER, _over(max_num_seqs=1, rate=2.0),
         "one request at a time at a rate the default batch of 16 serves: the queue grows behind the cap"),
    Case("sched-tiny-budget", SCHEDULER, _over(max_num_batched_tokens=32, rate=2.0),
         "32 tokens a step with chunked prefill: a 128-token prompt takes four steps, arrivals queue for budget"),
    Case("sched-wide-chunks", SCHEDULER,
         _over(max_num_batched_tokens=2048, long_prompt_share=0.2, long_prompt_len=1800,
               prompt_len="lognormal:64:0.5", rate=1.5),
         "chunked prefill with a 2048-token budget and no per-request cap: a long prompt still fills a whole step"),
    # cold_path: requests wait for a model to be loaded on the serving path
    Case("cold-load", COLD_PATH, SCENARIOS["cold-load"].defaults,
         "four models, one resident at a time: idle models are evicted and loaded again while serving"),
    Case("cold-start", COLD_PATH,
         _over(models=2, num_preload_models=0, max_resident_models=1, rate=2.0, prompt_len="64", output_len="16"),
         "two models, none preloaded, room for one: the first requests and every switch wait for a load"),
    Case("cold-spread", COLD_PATH,
         _over(models=3, num_preload_models=1, max_resident_models=2, rate=2.0, prompt_len="lognormal:64:0.5",
               output_len="uniform:8:24"),
         "three models spread evenly, two resident: a third of requests find their model evicted"),
    # healthy: nothing should fire, at several loads
    Case("healthy", None, SCENARIOS["healthy"].defaults, "the healthy scenario: paged, chunked prefill, rate 1"),
    Case("healthy-light", None, _over(rate=0.5), "paged, chunked prefill, rate 0.5"),
    Case("healthy-moderate", None, _over(rate=2.0), "paged, chunked prefill, rate 2: busier but within capacity"),
    Case("healthy-closed", None, _over(concurrency=4), "closed loop, four requests in flight"),
)

CASES = {c.name: c for c in MATRIX}
# --quick: one cause per stage and one healthy load
QUICK = ("kv-fragmentation", "sched-hol-blocking", "cold-load", "healthy")
