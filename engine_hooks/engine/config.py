"""Engine configuration, validated once so the rest of the engine can trust it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .presets import PRESETS


class ConfigError(ValueError):
    """A configuration value that the engine cannot run with; the message names the flag."""


ALLOCATORS = ("paged", "contiguous")
POLICIES = ("fcfs", "short-first", "length-bucket")
DTYPES = ("auto", "float32", "float16", "bfloat16")
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(text: str | int) -> int:
    """'256MiB', '1.5GB', '4096' -> bytes."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ConfigError(f"--kv-cache-memory: cannot read {text!r} as a size (examples: 268435456, 256MiB, 1GB)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


@dataclass
class EngineConfig:
    model: str = "small"
    models: int = 1                      # registered models, named model-0 .. model-(N-1)
    num_preload_models: int = 1          # resident before the first request
    max_resident_models: int | None = None  # None: every registered model may stay resident
    block_size: int = 16
    max_num_seqs: int = 16
    max_num_batched_tokens: int | None = None  # None: 512 with chunked prefill, else max(2048, max_model_len)
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0   # with chunked prefill: most prefill tokens one request gets per step
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
            self.max_num_batched_tokens = 512 if self.enable_chunked_prefill else max(2048, self.max_model_len)
        self.validate()

    def validate(self) -> None:
        if self.model not in PRESETS:
            raise ConfigError(f"--model: unknown preset {self.model!r} (choose from {', '.join(PRESETS)})")
        bs = self.block_size
        if not (8 <= bs <= 1024 and bs & (bs - 1) == 0):
            raise ConfigError(f"--block-size: {bs} is not a power of two between 8 and 1024")
        if self.allocator not in ALLOCATORS:
            raise ConfigError(f"--allocator: {self.allocator!r} is not one of {', '.join(ALLOCATORS)}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"--dtype: {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.policy not in POLICIES:
            raise ConfigError(f"--policy: {self.policy!r} is not one of {', '.join(POLICIES)}")
        for flag, value in (("--max-num-seqs", self.max_num_seqs), ("--max-model-len", self.max_model_len),
                            ("--models", self.models), ("--max-num-batched-tokens", self.max_num_batched_tokens)):
            if value < 1:
                raise ConfigError(f"{flag}: must be at least 1, got {value}")
        if self.max_num_batched_tokens < bs:
            raise ConfigError(f"--max-num-batched-tokens: {self.max_num_batched_tokens} is smaller than one "
                              f"block ({bs} tokens)")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ConfigError(f"--max-num-batched-tokens: without chunked prefill it must be >= --max-model-len "
                              f"({self.max_model_len}), got {self.max_num_batched_tokens}")
        if not 0 <= self.num_preload_models <= self.models:
            raise ConfigError(f"--num-preload-models: {self.num_preload_models} is not between 0 and --models "
                              f"({self.models})")
        if self.long_prefill_token_threshold < 0:
            raise ConfigError(f"--long-prefill-token-threshold: must be >= 0, got {self.long_prefill_token_threshold}")
        if self.max_resident_models is not None and self.max_resident_models < 1:
            raise ConfigError(f"--max-resident-models: must be at least 1, got {self.max_resident_models}")
        per_token = self.kv_bytes_per_token()
        if self.kv_cache_memory < per_token * bs:
            raise ConfigError(f"--kv-cache-memory: {self.kv_cache_memory} bytes hold less than one block "
                              f"({per_token * bs} bytes)")
        if self.num_blocks() * bs < self.max_model_len:
            raise ConfigError(f"--kv-cache-memory: {self.kv_cache_memory} bytes hold {self.num_blocks() * bs} "
                              f"tokens, too few for one request of --max-model-len {self.max_model_len} "
                              f"({per_token * self.max_model_len} bytes needed)")

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
        """Blocks a request may need at most: the contiguous allocator reserves this many up front."""
        return -(-self.max_model_len // self.block_size)
