"""The bundled engine's vocabulary for the agent outside the lab: its configuration, presets,
request parameters and allocators. The lab hosts the engine and is the agent's one door to
`engine_hooks.engine` (tests/project/test_layers.py), so that a change in the engine's layout is
met here. Nothing here imports torch; `EngineStopped`, which lives beside the engine loop, is
imported when first asked for."""

from importlib import import_module

from stagelens.engine_hooks.engine.allocator import make_allocator
from stagelens.engine_hooks.engine.config import (
    ALLOCATORS,
    CHOICES,
    DTYPES,
    MAX_TOKENS,
    POLICIES,
    ConfigError,
    EngineConfig,
    parse_bytes,
    read_size,
    refused_choice,
)
from stagelens.engine_hooks.engine.presets import PRESETS
from stagelens.engine_hooks.engine.request import SEED_RANGE, FinishReason, SamplingParams

__all__ = ["ALLOCATORS", "CHOICES", "DTYPES", "MAX_TOKENS", "POLICIES", "PRESETS", "SEED_RANGE", "ConfigError",
           "EngineConfig", "FinishReason", "SamplingParams", "make_allocator", "parse_bytes",
           "read_size", "refused_choice"]


def __getattr__(name: str):
    if name == "EngineStopped":
        return import_module("stagelens.engine_hooks.engine.engine").EngineStopped
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
