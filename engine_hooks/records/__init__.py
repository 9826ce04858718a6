"""The records every engine source fills, the bundled engine's hooks and the sources read from
outside alike: the snapshot (`snapshot.py`), per-request timelines (`timeline.py`), where a
request's time went (`attribution.py`), the wait reasons (`waits.py`), percentiles (`stats.py`),
and the `EngineSource` protocol (`source.py`). The bottom layer: nothing here imports the engine,
the hooks or the agent."""
