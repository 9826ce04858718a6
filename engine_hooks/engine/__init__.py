"""The bundled paged-attention serving engine. Pure torch; it knows nothing of who observes it.

Names are imported lazily so that configuration and presets can be read without importing torch.
"""

from importlib import import_module

_EXPORTS = {
    "ConfigError": ".config", "EngineConfig": ".config", "LLMEngine": ".engine",
    "StepStats": ".engine", "EngineTotals": ".engine", "EngineStopped": ".engine",
    "Request": ".request", "SamplingParams": ".request", "Status": ".request",
    "FinishReason": ".request",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
