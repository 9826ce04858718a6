"""The engine settings a simulation runs under: today's as recorded, and candidates (`--set
FLAG=VALUE`), checked by the bundled engine's own configuration so that a flag the engine refuses
is refused here too."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from stagelens.errors import UserError
from stagelens.lab.bundled_engine import MAX_TOKENS, ConfigError, EngineConfig
from stagelens.lab.flag_values import FLAG_VALUES
from stagelens.numbers import shown

# The settings a candidate may change: they decide what the scheduler, the KV cache and residency do
TUNABLE = ("block_size", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
           "long_prefill_token_threshold", "policy", "allocator", "kv_cache_memory",
           "num_preload_models", "max_resident_models")
# What `--today` may say besides: of an engine read from outside, the longest request it takes
TODAY_ONLY = ("max_model_len",)


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
    # the engine's own settings were not recorded (agent/whatif/predict.py)
    read_from_outside: bool = False

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
        """From a bundle's `engine_config` record (or an agent's window), as its reader checked it
        (`recorded_problem`)."""
        problem = recorded_problem(cfg)
        if problem:
            raise UserError(f"the recording's engine_config: {problem}")
        return cls._from_record(cfg)

    @classmethod
    def _from_record(cls, cfg: dict) -> Settings:
        return cls(**{f.name: cfg[f.name] for f in dataclasses.fields(cls) if f.name in cfg and f.name in _RECORDED})

    @classmethod
    def assumed(cls, info, num_blocks: int | None, longest: int | None = None,
                told: int | None = None) -> Settings:
        """For an engine whose settings were not recorded (read from outside): the bundled
        engine's defaults, with what its snapshot says (`EngineInfo`: block size, batch and
        budget where published; the KV blocks). Its longest request: `told` (`--today
        max-model-len=N`), else as published, else `longest` (the longest recorded, prompt and
        output) as far as its KV cache and a step's budget (without chunked prefill) hold one."""
        base = EngineConfig(device="cpu", dtype="float32")
        values = {f.name: getattr(base, f.name) for f in dataclasses.fields(cls) if hasattr(base, f.name)}
        values["kv_bytes_per_token"] = base.kv_bytes_per_token()
        for key in ("block_size", "max_num_seqs", "max_num_batched_tokens",
                    "enable_chunked_prefill", "policy", "max_model_len", "allocator", "models",
                    "num_preload_models"):
            value = getattr(info, key, None) if info is not None else None
            if value is not None:
                values[key] = value
        if num_blocks:
            values["kv_cache_memory"] = num_blocks * values["block_size"] * values["kv_bytes_per_token"]
        if told is not None:
            values["max_model_len"] = told
        elif longest and getattr(info, "max_model_len", None) is None:
            room = [longest, MAX_TOKENS] + ([num_blocks * values["block_size"]] if num_blocks else [])
            if not values["enable_chunked_prefill"] and isinstance(values["max_num_batched_tokens"], int):
                room.append(values["max_num_batched_tokens"])
            values["max_model_len"] = max(2, min(room))
        # its KV cache unknown: at least the one request of max_model_len any engine holds (the
        # one told too: it holds what its operator says it takes)
        if not num_blocks:
            blocks = -(-values["max_model_len"] // values["block_size"])
            values["kv_cache_memory"] = max(values["kv_cache_memory"],
                                            blocks * values["block_size"] * values["kv_bytes_per_token"])
        return cls(**values, read_from_outside=True)

    def changed(self, changes: dict) -> Settings:
        """These settings with `changes` (field -> value) applied, validated as the engine would."""
        values = {**dataclasses.asdict(self), **changes}
        engine_fields = {f.name for f in dataclasses.fields(EngineConfig)}
        dtype = "float32" if self.kv_bytes_per_token == _per_token(self.model, 4) else "float16"
        try:
            checked = EngineConfig(**{k: v for k, v in values.items() if k in engine_fields},
                                   device="cpu", dtype=dtype)
        except ConfigError as exc:
            raise UserError(str(exc)) from None
        return dataclasses.replace(self, **{k: getattr(checked, k) for k in (*TUNABLE, *TODAY_ONLY)})


# What a recorded engine_config gives the simulator: every setting but where it came from
_RECORDED = tuple(f.name for f in dataclasses.fields(Settings) if f.name != "read_from_outside")
_KINDS = {"int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
          "bool": (lambda v: isinstance(v, bool), "true or false"),
          "str": (lambda v: isinstance(v, str), "a string"),
          "int | None": (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
                         "a whole number or null")}


def recorded_problem(cfg) -> str | None:
    """What is wrong with a recorded engine_config (agent/bundle.py `engine_settings` wrote it),
    naming the field; None when the simulator can run on it: every setting there, of the type
    written, one the engine itself would take, and the KV bytes a token takes what its model
    holds one in (at 16 or 32 bits)."""
    if not isinstance(cfg, dict):
        return f"must be an object, got {shown(cfg)}"
    for f in dataclasses.fields(Settings):
        if f.name not in _RECORDED or (f.name not in cfg and f.default is not dataclasses.MISSING):
            continue
        if f.name not in cfg:
            return f"{f.name}: missing"
        ok, words = _KINDS[f.type]
        if not ok(cfg[f.name]):
            return f"{f.name}: must be {words}, got {shown(cfg[f.name])}"
    settings = Settings._from_record(cfg)
    try:
        settings.changed({})
    except UserError as exc:
        return str(exc)
    per_token = sorted({_per_token(settings.model, 2), _per_token(settings.model, 4)})
    if settings.kv_bytes_per_token not in per_token:
        return (f"kv_bytes_per_token: must be what a token of model {settings.model!r} takes "
                f"({' or '.join(map(str, per_token))} bytes), got "
                f"{shown(settings.kv_bytes_per_token)}")
    return None


def _per_token(model: str, element: int) -> int:
    from stagelens.lab.bundled_engine import PRESETS

    p = PRESETS.get(model) or PRESETS["small"]
    return 2 * p.num_layers * p.num_kv_heads * p.head_dim * element


def parse_set(texts: list[str] | tuple[str, ...], option: str = "--set") -> dict:
    """`max-num-seqs=16,enable-chunked-prefill=true` (and more such texts) -> {"max_num_seqs": 16,
    ...}, all in one; UserError on a flag it does not know, a flag given twice (which one was
    meant?) or a value the lab's flag would refuse (read by the same entry of
    agent/lab/flag_values.py, refused in the same words)."""
    out: dict = {}
    given: dict = {}
    for text in (part for whole in texts for part in whole.split(",")):
        name, sep, raw = text.partition("=")
        key = name.strip().removeprefix("--").replace("-", "_")
        if not sep or not raw.strip():
            raise UserError(f"{option} {text[:60]!r}: expected FLAG=VALUE (e.g. max-num-seqs=16)")
        known = (*TUNABLE, *TODAY_ONLY) if option == "--today" else TUNABLE
        if key not in known:
            verb = "take" if option == "--today" else "change"
            raise UserError(f"{option} {name[:40]}: not a flag what-if can {verb} (choose from "
                            f"{', '.join(k.replace('_', '-') for k in known)})")
        if key in given:
            raise UserError(f"{option} {name.strip()[:40]}: given twice ({given[key][:40]} and {text.strip()[:40]}): "
                            "give each flag once")
        given[key] = text.strip()
        out[key] = FLAG_VALUES[key].checked(f"{option} {name.strip()[:40]}", raw.strip())
    return out


def check_candidates(settings: Settings, texts: Sequence[str], candidates: list[dict]) -> None:
    """Each `--set` (`texts`, read into `candidates`) as the engine would take it on `settings`;
    UserError naming the one refused. Where several `--set` change different flags, the line also
    says that each is one candidate and how one `--set` changes them together: two `--set` are a new
    user's first try at that."""
    for text, changes in zip(texts, candidates, strict=True):
        try:
            settings.changed(changes)
        except UserError as exc:
            hint = _one_candidate_each(texts, candidates)
            raise UserError(f"--set {text[:60]}: {exc}{hint}") from None


def _one_candidate_each(texts: Sequence[str], candidates: list[dict]) -> str:
    flags = [key for changes in candidates for key in changes]
    # one --set, or one flag in two of them (two values of it compared): nothing to join
    if len(texts) < 2 or len(flags) != len(set(flags)):
        return ""
    given = " ".join(f"--set {text}" for text in texts)
    return (f"; each --set is one candidate ({given}: {len(texts)} candidates); "
            f"one candidate changing them together: --set {','.join(texts)}")


def as_set_flags(changes: dict) -> dict:
    """{"max_num_seqs": 16} -> {"max-num-seqs": 16}: the JSON's `set`, in the lab's flag names."""
    return {k.replace("_", "-"): v for k, v in changes.items()}
