"""Engine configuration, validated once so the rest of the engine can trust it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .presets import PRESETS


class ConfigError(ValueError):
    """A configuration value that the engine cannot run with; the message names the flag."""


# Bounds on the work one run may ask for (a few flags once asked for thousands of weight files or
# an endless stream of requests); every scenario and the report's settings sit well inside them.
MAX_MODELS = 64
MAX_TOKENS = 2**17                 # 128K: longest sequence, largest step budget, longest prompt
DEVICE_SHAPE = re.compile(r"auto|cpu|mps|cuda(:[0-9]+)?")


@dataclass(frozen=True)
class Bound:
    """The values one setting may take. The CLI builds its flag types from these, so a flag and the
    engine refuse the same values with the same words."""
    low: float
    high: float
    unit: str = ""
    integer: bool = True
    low_open: bool = False

    def check(self, flag: str, value) -> None:
        """ConfigError naming the flag, the bounds and the unit unless `value` lies in them (NaN
        never does)."""
        kind = int if self.integer else int | float
        if not (isinstance(value, kind) and not isinstance(value, bool)
                and (self.low < value if self.low_open else self.low <= value) and value <= self.high):
            raise ConfigError(f"{flag}: must be {self.describe()}, got {shown(value)}")

    def describe(self) -> str:
        number = "a whole number" if self.integer else "a number"
        return (f"{number} in {'(' if self.low_open else '['}{shown(self.low)}, {shown(self.high)}]"
                f"{' ' + self.unit if self.unit else ''}")


def shown(value) -> str:
    """A value in a message: numbers as numbers, never thousands of digits."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if value.bit_length() <= 80 else f"a {value.bit_length()}-bit number"
    text = f"{value:g}" if isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


MODELS = Bound(1, MAX_MODELS, "models")
# model i is seeded with seed + i, inside what torch.Generator takes
SEED = Bound(0, 2**63 - 1)
ENGINE_BOUNDS = {
    "models": MODELS,
    "num_preload_models": Bound(0, MAX_MODELS, "models"),
    "max_resident_models": MODELS,
    "block_size": Bound(8, 1024, "tokens"),
    "max_num_seqs": Bound(1, 1024, "requests"),
    "max_num_batched_tokens": Bound(1, MAX_TOKENS, "tokens"),
    "long_prefill_token_threshold": Bound(0, MAX_TOKENS, "tokens"),
    # a request needs a prompt token and an output token
    "max_model_len": Bound(2, MAX_TOKENS, "tokens"),
    "kv_cache_memory": Bound(1, 2**40, "bytes"),
    "seed": SEED,
}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


ALLOCATORS = ("paged", "contiguous")
POLICIES = ("fcfs", "short-first", "length-bucket")
DTYPES = ("auto", "float32", "float16", "bfloat16")
# the names each choice setting takes
CHOICES = {"model": tuple(PRESETS), "allocator": ALLOCATORS, "dtype": DTYPES, "policy": POLICIES}


def refused_choice(name: str, value) -> str | None:
    """What is wrong with `value` for the choice setting `name`, naming no flag, or None: the one
    wording, for the engine's config and every flag that takes one (the agent's flag table)."""
    choices = CHOICES[name]
    if value in choices:
        return None
    if name == "model":
        return f"unknown preset {value!r} (choose from {', '.join(choices)})"
    return f"{value!r} is not one of {', '.join(choices)}"
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(text: str | int) -> int:
    """'256MiB', '1.5GB', '4096' -> bytes."""
    problem, size = read_size(text)
    if problem:
        raise ConfigError(f"--kv-cache-memory: {problem}")
    return size


def read_size(text: str | int) -> tuple[str | None, int]:
    """(what is wrong, naming no flag, or None; the bytes) of '256MiB', '1.5GB', '4096': the one
    reading of a size, for the engine's config and every flag that takes one (the agent's flag
    table)."""
    if isinstance(text, int):
        return None, text
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        return f"cannot read {text!r} as a size (examples: 268435456, 256MiB, 1GB)", 0
    size = float(match.group(1)) * _UNITS[match.group(2).lower()]
    # the bound also keeps a 400-digit number from overflowing int()
    if not size <= ENGINE_BOUNDS["kv_cache_memory"].high:
        return f"must be {ENGINE_BOUNDS['kv_cache_memory'].describe()}, got {shown(text)}", 0
    return None, int(size)


@dataclass
class EngineConfig:
    model: str = "small"
    models: int = 1                      # registered models, named model-0 .. model-(N-1)
    num_preload_models: int = 1          # resident before the first request
    max_resident_models: int | None = None  # None: every registered model may stay resident
    block_size: int = 16
    max_num_seqs: int = 16
    # None: 512 with chunked prefill, else max(2048, max_model_len)
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool = True
    # with chunked prefill: most prefill tokens one request gets per step
    long_prefill_token_threshold: int = 0
    allocator: str = "paged"
    policy: str = "fcfs"
    max_model_len: int = 2048
    kv_cache_memory: int = 128 * 2**20
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0
    model_dir: str | None = None         # where weight files live; None: a per-user cache directory
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kv_cache_memory = parse_bytes(self.kv_cache_memory)
        if self.max_num_batched_tokens is None:
            # validate() judges it
            longest = self.max_model_len if isinstance(self.max_model_len, int) else 0
            self.max_num_batched_tokens = 512 if self.enable_chunked_prefill else max(2048, longest)
        self.validate()

    def _check_choice(self, name: str) -> None:
        problem = refused_choice(name, getattr(self, name))
        if problem:
            raise ConfigError(f"{flag(name)}: {problem}")

    def validate(self) -> None:
        self._check_choice("model")
        for name, bound in ENGINE_BOUNDS.items():
            # None: all of them
            if not (name == "max_resident_models" and self.max_resident_models is None):
                bound.check(flag(name), getattr(self, name))
        bs = self.block_size
        if bs & (bs - 1):
            raise ConfigError(f"--block-size: {bs} is not a power of two between 8 and 1024")
        for name in ("allocator", "dtype", "policy"):
            self._check_choice(name)
        if self.max_num_batched_tokens < bs:
            raise ConfigError(f"--max-num-batched-tokens: {self.max_num_batched_tokens} is smaller "
                              f"than one block ({bs} tokens)")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ConfigError(f"--max-num-batched-tokens: without chunked prefill it must be >= "
                              f"--max-model-len ({self.max_model_len}), got "
                              f"{self.max_num_batched_tokens}")
        if self.num_preload_models > self.models:
            raise ConfigError(f"--num-preload-models: {self.num_preload_models} is not between 0 "
                              f"and --models ({self.models})")
        self.check_device()
        per_token = self.kv_bytes_per_token()
        if self.kv_cache_memory < per_token * bs:
            raise ConfigError(f"--kv-cache-memory: {self.kv_cache_memory} bytes hold less than one "
                              f"block ({per_token * bs} bytes)")
        if self.num_blocks() * bs < self.max_model_len:
            raise ConfigError(f"--kv-cache-memory: {self.kv_cache_memory} bytes hold "
                              f"{self.num_blocks() * bs} tokens, too few for one request of "
                              f"--max-model-len {self.max_model_len} "
                              f"({per_token * self.max_model_len} bytes needed)")

    def check_device(self) -> None:
        """The device is one torch can name, and one this machine has: before any engine is
        built."""
        if not isinstance(self.device, str) or not DEVICE_SHAPE.fullmatch(self.device):
            raise ConfigError(f"--device: {self.device!r} is not cpu, cuda, cuda:N, mps or auto")
        if self.device in ("auto", "cpu"):
            return
        import torch  # only for a device asked for by name: configuration is read without torch

        if self.device == "mps" and not torch.backends.mps.is_available():
            raise ConfigError("--device: mps asked for, but torch sees no MPS device")
        if self.device.startswith("cuda"):
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            index = int(self.device.partition(":")[2] or 0)
            if count == 0:
                raise ConfigError(f"--device: {self.device} asked for, but torch sees no CUDA device")
            if index >= count:
                raise ConfigError(f"--device: {self.device} asked for, but torch sees {count} CUDA "
                                  f"device{'s' if count > 1 else ''} (cuda:0 to cuda:{count - 1})")

    @property
    def preset(self):
        return PRESETS[self.model]

    def dtype_bytes(self) -> int:
        return 4 if self.resolved_dtype() == "float32" else 2

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolved_dtype(self) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "float32" if self.resolved_device() == "cpu" else "bfloat16"

    def kv_bytes_per_token(self) -> int:
        p = self.preset
        return 2 * p.num_layers * p.num_kv_heads * p.head_dim * self.dtype_bytes()

    def num_blocks(self) -> int:
        return self.kv_cache_memory // (self.kv_bytes_per_token() * self.block_size)

    def blocks_per_request(self) -> int:
        """Blocks a request may need at most: the contiguous allocator reserves this many up
        front."""
        return -(-self.max_model_len // self.block_size)
