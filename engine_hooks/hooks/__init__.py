"""What is injected into the bundled engine from outside: KV fragmentation and access efficiency,
per-request scheduler wait, and the cold path. `instrumentation.instrument(engine)` returns the
flight recorder (`recorder.py`), whose snapshot and timelines are the records in
`engine_hooks/records/`."""
