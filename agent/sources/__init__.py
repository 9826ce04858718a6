"""Engine sources read from outside: an engine stagelens does not instrument (vLLM, SGLang),
observed through what it publishes itself. Each fills the typed engine snapshot
(engine_hooks/records/snapshot.py) with what it can observe and leaves the rest None (not
observable); docs/engines.md maps each signal."""
