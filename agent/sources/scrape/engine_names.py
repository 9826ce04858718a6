"""Which engine a scrape comes from, and which generation of its metric names; or, when it holds
none of the engine's families, one line saying what it holds instead.

vLLM and SGLang renamed their families more than once (vLLM V0 -> V1, `gpu_cache_usage_perc` ->
`kv_cache_usage_perc`; SGLang 0.3 -> 0.4 and its per-rank labels), and a scrape of the wrong engine,
or of an engine with its metrics off, holds only the Python client's `python_*`/`process_*`
families: read as the engine, that is a silent "nothing happened". So the generation is said beside
every diagnosis, and a scrape with none of the engine's families is a failed collection, never an
idle engine.
"""

from __future__ import annotations

from stagelens.engine_hooks.records.vllm_names import (
    CPU_CACHE_USAGE_PERC,
    GPU_CACHE_USAGE_PERC,
    GPU_PREFIX_CACHE_HIT_RATE,
    KV_CACHE_USAGE_PERC,
    NUM_REQUESTS_SWAPPED,
)
from stagelens.errors import CollectError
from stagelens.sources.scrape.prometheus_text import Exposition

PREFIX = {"vllm": "vllm:", "sglang": "sglang:"}
ENGINE_NAME = {"vllm": "vLLM", "sglang": "SGLang"}
_METRICS_OFF = {"vllm": "vLLM turns them off with --disable-log-stats",
                "sglang": "SGLang publishes them only with --enable-metrics"}
# Families only vLLM's V0 engine published (V1 dropped swapping and the CPU cache)
_V0_ONLY = (NUM_REQUESTS_SWAPPED, CPU_CACHE_USAGE_PERC, GPU_PREFIX_CACHE_HIT_RATE)
_RANK_LABELS = ("engine_type", "tp_rank", "dp_rank", "pp_rank")


class EngineMismatchError(CollectError):
    """The scrape holds none of the engine's families: another engine, its metrics off, or no
    engine."""


def generation(ex: Exposition, kind: str, where: str) -> str:
    """The engine and its names' generation ("vLLM V1 (0.10-style names)"); EngineMismatchError,
    saying what `where` publishes instead, when the scrape holds none of `kind`'s families."""
    if not any(name.startswith(PREFIX[kind]) for name in ex.families):
        raise EngineMismatchError(found_instead(ex, kind, where))
    return _vllm(ex) if kind == "vllm" else _sglang(ex)


def found_instead(ex: Exposition, kind: str, where: str) -> str:
    """One line: no family of `kind` at `where`, what is there, and what that suggests."""
    spaces: dict[str, int] = {}
    for name in ex.families:
        space = name.split(":", 1)[0] + ":*" if ":" in name else name.split("_", 1)[0] + "_*"
        spaces[space] = spaces.get(space, 0) + 1
    other = next((k for k in PREFIX if k != kind and f"{PREFIX[k]}*" in spaces), None)
    if other is not None:
        return (f"no {PREFIX[kind]}* metric at {where}, but {spaces[PREFIX[other] + '*']} "
                f"{PREFIX[other]}* ones: is this {ENGINE_NAME[other]}? (--engine {other})")
    if not spaces:
        return f"no metric at all at {where}: is this {ENGINE_NAME[kind]}'s /metrics?"
    listed = "/".join(sorted(spaces)[:4]) + ("/..." if len(spaces) > 4 else "")
    return (f"only {listed} metrics at {where}, no {PREFIX[kind]}* one: is this "
            f"{ENGINE_NAME[kind]}? ({_METRICS_OFF[kind]})")


def _labels(ex: Exposition, prefix: str, name: str) -> set[str]:
    """The values label `name` takes over every family of the engine."""
    return {s.labels[name] for f in ex.families.values() if f.name.startswith(prefix)
            for s in f.samples if s.labels.get(name)}


def _vllm(ex: Exposition) -> str:
    engines = _labels(ex, "vllm:", "engine")
    if _vllm_v0(ex, engines):
        said = "vLLM V0 (gpu_cache_usage_perc, no engine label)"
    elif KV_CACHE_USAGE_PERC in ex.families and GPU_CACHE_USAGE_PERC in ex.families:
        said = "vLLM V1 (0.10-style names)"
    elif GPU_CACHE_USAGE_PERC in ex.families:
        said = "vLLM V1 (0.8/0.9-style names)"
    else:
        said = "vLLM V1 (0.11+ names)"
    return said + (f", {len(engines)} data-parallel engines" if len(engines) > 1 else "")


def _vllm_v0(ex: Exposition, engines: set[str]) -> bool:
    """Whether the scrape is vLLM V0's: a family only V0 published, or the old usage name alone
    with no `engine` label on any family (V1 labels every family of its engines with it; V0 never
    did), as a V0 build that publishes none of those families shows."""
    if any(n in ex.families for n in _V0_ONLY):
        return True
    return GPU_CACHE_USAGE_PERC in ex.families and KV_CACHE_USAGE_PERC not in ex.families and not engines


def _sglang(ex: Exposition) -> str:
    if "sglang:num_requests_running" in ex.families:
        said = "SGLang 0.3 (num_requests_running, label name)"
    elif any(_labels(ex, "sglang:", label) for label in _RANK_LABELS):
        said = "SGLang 0.4.4+ (num_running_reqs, per-rank labels)"
    else:
        said = "SGLang 0.4 (num_running_reqs, label model_name)"
    ranks = _labels(ex, "sglang:", "dp_rank")
    return said + (f", {len(ranks)} data-parallel ranks" if len(ranks) > 1 else "")
