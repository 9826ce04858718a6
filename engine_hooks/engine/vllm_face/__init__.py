"""The bundled engine's vLLM-compatible interfaces: what a vLLM server publishes, published by the
bundled engine so that anything built to read vLLM from outside (stagelens's own
`agent/sources/scrape/engine_source.py` among them) can attach to it as it would to a real vLLM
server.

- `metrics.py`: vLLM V1's Prometheus families, names, labels and buckets; `server.py` serves them at
  `/metrics` on a port of their own.
- `spans.py`: vLLM's per-request `llm_request` OTLP span (`--otlp-traces-endpoint`), over OTLP/HTTP.
- `kv_events_publisher.py`: vLLM's KV-cache events (`--kv-events-config`), on ZMQ.

Each is an engine observer (`LLMEngine.add_observer`), the engine's own reporting seam, as vLLM's
stat loggers are; stagelens's hooks (engine_hooks/hooks/instrumentation.py and the rest) are not
involved and need not be installed. `VllmFace` attaches them to an engine, running or not, and
detaches them.
"""

from .face import VllmFace

__all__ = ["VllmFace"]
