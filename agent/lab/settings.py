"""The engine and workload settings of a lab run, built from flags and a scenario's defaults.

Named like vLLM's and the report's; the CLI's flags (agent/commands/flags.py) are typed by the same
bounds, and whatever the user typed wins over a scenario's defaults.
"""

from __future__ import annotations

from stagelens.engine_hooks.engine.config import ENGINE_BOUNDS, ConfigError, EngineConfig
from stagelens.errors import UserError
from stagelens.lab.scenarios import SCENARIOS
from stagelens.lab.workload import WORKLOAD_BOUNDS, LengthDist, WorkloadConfig

ENGINE_FIELDS = ("model", "models", "block_size", "max_num_seqs", "max_num_batched_tokens",
                 "enable_chunked_prefill", "long_prefill_token_threshold", "num_preload_models",
                 "max_resident_models", "allocator", "policy", "max_model_len", "kv_cache_memory",
                 "device", "dtype", "seed", "model_dir")
WORKLOAD_FIELDS = ("rate", "concurrency", "prompt_len", "output_len", "long_prompt_share",
                   "long_prompt_len", "models", "duration", "seed", "temperature")
BOUNDS = {**ENGINE_BOUNDS, **WORKLOAD_BOUNDS}


def build_configs(flags: dict, defaults: dict | None = None) -> tuple[EngineConfig, WorkloadConfig]:
    """Engine and workload configs from (scenario) defaults overlaid with the flags the user
    gave."""
    values = dict(defaults or {})
    values.update({k: v for k, v in flags.items() if v is not None})
    try:
        engine = EngineConfig(**{k: values[k] for k in ENGINE_FIELDS if k in values})
        workload_values = {k: values[k] for k in WORKLOAD_FIELDS if k in values}
        for key in ("prompt_len", "output_len"):
            if isinstance(workload_values.get(key), str):
                workload_values[key] = LengthDist.parse(workload_values[key],
                                                        "--" + key.replace("_", "-"))
        if workload_values.get("concurrency") is not None and flags.get("rate") is None:
            workload_values["rate"] = None
        workload = WorkloadConfig(**workload_values)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    return engine, workload


def scenario_configs(flags: dict, scenario: str | None,
                     overrides: dict | None = None) -> tuple[EngineConfig, WorkloadConfig]:
    """The configs of `scenario` (None: the flags alone) with the user's flags, then `overrides`
    (a fix), on top."""
    defaults = SCENARIOS[scenario].defaults if scenario else {}
    return build_configs({**flags, **(overrides or {})}, defaults)
