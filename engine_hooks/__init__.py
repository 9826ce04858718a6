"""The bundled engine and what observes it, in three rooms and a shared floor:

- `engine/`: the engine itself (pure torch, it knows nothing of who observes it), with
  `engine/vllm_face/`,
  the vLLM-compatible interfaces through which it speaks.
- `hooks/`: what is injected into the engine from outside (`instrument(engine)` returns the flight
  recorder).
- `records/`: the records every engine source fills (snapshot, timeline, attribution, wait reasons,
  stats)
  and the `EngineSource` protocol the bundled host and the outside sources implement.
- `shared/`: bottom-layer helpers (the bounded HTTP server) any layer may use.

tests/project/test_layers.py checks that the imports keep to these layers.
"""

from importlib import import_module

_EXPORTS = {
    "instrument": ".hooks.instrumentation", "uninstrument": ".hooks.instrumentation",
    "is_instrumented": ".hooks.instrumentation",
    "Recorder": ".hooks.recorder", "RecorderConfig": ".hooks.recorder",
    "RequestTimeline": ".records.timeline", "Wait": ".records.timeline",
    "EngineSnapshot": ".records.snapshot", "SnapshotError": ".records.snapshot",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
