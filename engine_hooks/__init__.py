"""Hooks injected into the bundled engine from outside: KV fragmentation and access efficiency,
per-request scheduler wait, and the cold path. `instrument(engine)` returns the flight recorder."""

from importlib import import_module

_EXPORTS = {
    "instrument": ".instrumentation", "uninstrument": ".instrumentation", "is_instrumented": ".instrumentation",
    "Recorder": ".recorder", "RecorderConfig": ".recorder",
    "RequestTimeline": ".timeline", "Wait": ".timeline",
    "EngineSnapshot": ".snapshot", "SnapshotError": ".snapshot",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
