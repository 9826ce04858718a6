"""Lab scenarios: the bundled engine set up to reproduce one stage of the report, or none.

Each gives defaults for the engine and workload flags; whatever the user types wins over them.
`lab --fixed` then applies the diagnosis's own recommendations and runs again.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    name: str
    stage: str | None              # the stage it reproduces; None: nothing should fire
    summary: str
    defaults: dict
    # the figure the fix should improve (lower is better). Where the stage causes queueing it is the
    # wait the scheduler decided: a fast machine can hide that wait from TTFT's median, and on a CPU
    # a bigger batch also slows each step
    headline: str


_COMMON = dict(model="small", max_model_len=2048, duration=20.0, prompt_len="lognormal:128:0.5",
               output_len="uniform:16:48")

SCENARIOS = {s.name: s for s in (
    Scenario("healthy", None, "paged KV, chunked prefill, light load: no stage should fire",
             dict(_COMMON, rate=1.0), "latency_p99_s"),
    Scenario("kv-fragmentation", "kv_cache",
             "contiguous KV reservation of max_model_len per request: most reserved slots stay empty",
             dict(_COMMON, allocator="contiguous", kv_cache_memory="64MiB", rate=1.2,
                  output_len="uniform:32:96"),
             "kv_fragmentation_ratio"),
    Scenario("hol-blocking", "scheduler",
             "no chunked prefill and some 1800-token prompts: short requests queue behind long prefills",
             dict(_COMMON, enable_chunked_prefill=False, max_num_batched_tokens=2048,
                  long_prompt_share=0.2, long_prompt_len=1800, prompt_len="lognormal:64:0.5",
                  rate=1.5),
             "decided_wait_p99_s"),
    Scenario("cold-load", "cold_path",
             "four models, one preloaded and room for one resident: idle models are evicted and "
             "loaded again on the serving path",
             dict(_COMMON, models=4, num_preload_models=1, max_resident_models=1, rate=2.0,
                  prompt_len="lognormal:64:0.5", output_len="uniform:8:24"),
             # the cold-start wait itself; with four models resident each step runs four forwards on
             # a CPU, so end-to-end latency need not fall
             "decided_wait_p99_s"),
    Scenario("chain", "kv_cache",
             "contiguous KV under heavier load: memory waste (stage 1) turns into queueing (stage 2)",
             dict(_COMMON, allocator="contiguous", kv_cache_memory="48MiB", rate=2.0,
                  output_len="uniform:32:96"),
             "decided_wait_p99_s"),
)}
