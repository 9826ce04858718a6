"""The engine settings a simulation runs under: today's as recorded, and candidates (`--set FLAG=VALUE`),
checked by the bundled engine's own configuration so that a flag the engine refuses is refused here too."""

from __future__ import annotations

import dataclasses

from agent.errors import UserError
from agent.lab.bundled_engine import ConfigError, EngineConfig
from agent.numbers import number_of_text

# The settings a candidate may change: they decide what the scheduler, the KV cache and residency do
TUNABLE = ("block_size", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
           "long_prefill_token_threshold", "policy", "allocator", "kv_cache_memory", "num_preload_models",
           "max_resident_models")
_BOOLEAN = {"true": True, "false": False, "on": True, "off": False, "1": True, "0": False, "yes": True, "no": False}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the simulator honours of an engine configuration."""
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_chunked_prefill: bool
    long_prefill_token_threshold: int
    policy: str
    allocator: str
    max_model_len: int
    kv_cache_memory: int
    kv_bytes_per_token: int
    models: int
    num_preload_models: int
    max_resident_models: int | None
    model: str = "small"
    read_from_outside: bool = False     # the engine's own settings were not recorded (agent/whatif/predict.py)

    @property
    def num_blocks(self) -> int:
        return self.kv_cache_memory // (self.kv_bytes_per_token * self.block_size)

    @property
    def blocks_per_request(self) -> int:
        return -(-self.max_model_len // self.block_size)

    @property
    def model_names(self) -> list[str]:
        return [f"model-{i}" for i in range(self.models)]

    @classmethod
    def recorded(cls, cfg: dict) -> Settings:
        """From a bundle's `engine_config` record."""
        try:
            return cls(**{f.name: cfg[f.name] for f in dataclasses.fields(cls) if f.name in cfg})
        except TypeError as exc:
            raise UserError(f"the bundle's engine_config is incomplete: {exc}") from None

    @classmethod
    def assumed(cls, info, num_blocks: int | None) -> Settings:
        """For an engine whose settings were not recorded (read from outside): the bundled engine's defaults, with
        what its snapshot says (`EngineInfo`: block size, batch and budget where published; the KV blocks)."""
        base = EngineConfig(device="cpu", dtype="float32")
        values = {f.name: getattr(base, f.name) for f in dataclasses.fields(cls) if hasattr(base, f.name)}
        values["kv_bytes_per_token"] = base.kv_bytes_per_token()
        for key in ("block_size", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "policy",
                    "max_model_len", "allocator", "models", "num_preload_models"):
            value = getattr(info, key, None) if info is not None else None
            if value is not None:
                values[key] = value
        if num_blocks:
            values["kv_cache_memory"] = num_blocks * values["block_size"] * values["kv_bytes_per_token"]
        return cls(**values, read_from_outside=True)

    def changed(self, changes: dict) -> Settings:
        """These settings with `changes` (field -> value) applied, validated as the engine would."""
        values = {**dataclasses.asdict(self), **changes}
        engine_fields = {f.name for f in dataclasses.fields(EngineConfig)}
        dtype = "float32" if self.kv_bytes_per_token == _per_token(self.model, 4) else "float16"
        try:
            checked = EngineConfig(**{k: v for k, v in values.items() if k in engine_fields}, device="cpu", dtype=dtype)
        except ConfigError as exc:
            raise UserError(str(exc)) from None
        return dataclasses.replace(self, **{k: getattr(checked, k) for k in TUNABLE})


def _per_token(model: str, element: int) -> int:
    from agent.lab.bundled_engine import PRESETS

    p = PRESETS.get(model) or PRESETS["small"]
    return 2 * p.num_layers * p.num_kv_heads * p.head_dim * element


def parse_set(texts: list[str] | tuple[str, ...], option: str = "--set") -> dict:
    """`max-num-seqs=16,enable-chunked-prefill=true` (and more such texts) -> {"max_num_seqs": 16, ...}, all in
    one; UserError on a flag it does not know, a flag given twice (which one was meant?) or a value it cannot
    read."""
    out: dict = {}
    given: dict = {}
    for text in (part for whole in texts for part in whole.split(",")):
        name, sep, raw = text.partition("=")
        key = name.strip().removeprefix("--").replace("-", "_")
        if not sep or not raw.strip():
            raise UserError(f"{option} {text[:60]!r}: expected FLAG=VALUE (e.g. max-num-seqs=16)")
        if key not in TUNABLE:
            raise UserError(f"{option} {name[:40]}: not a flag what-if can change (choose from "
                            f"{', '.join(k.replace('_', '-') for k in TUNABLE)})")
        if key in given:
            raise UserError(f"{option} {name.strip()[:40]}: given twice ({given[key][:40]} and {text.strip()[:40]}): "
                            "give each flag once")
        given[key] = text.strip()
        out[key] = _value(key, raw.strip(), name, option)
    return out


def _value(key: str, raw: str, name: str, option: str):
    if key == "enable_chunked_prefill":
        if raw.lower() not in _BOOLEAN:
            raise UserError(f"{option} {name}: {raw[:40]!r} is not true or false")
        return _BOOLEAN[raw.lower()]
    if key in ("policy", "allocator"):
        return raw
    if key == "kv_cache_memory":
        from agent.lab.bundled_engine import parse_bytes

        try:
            return parse_bytes(raw)
        except ConfigError as exc:
            raise UserError(str(exc)) from None
    number = number_of_text(raw, integer=True)
    if number is None:
        raise UserError(f"{option} {name}: {raw[:40]!r} is not a whole number (ASCII digits, like 16)")
    return number


def as_set_flags(changes: dict) -> dict:
    """{"max_num_seqs": 16} -> {"max-num-seqs": 16}: the JSON's `set`, in the lab's flag names."""
    return {k.replace("_", "-"): v for k, v in changes.items()}
