"""`VllmFace`: the bundled engine's vLLM interfaces, attached to one engine and detached cleanly."""

from __future__ import annotations

import logging
import threading

from .metrics import VllmMetrics
from .server import MetricsServer
from .spans import LlmRequestSpans

log = logging.getLogger(__name__)


class VllmFace:
    """vLLM's `/metrics` (on its own port) and, with `otlp_traces_endpoint`, its `llm_request`
    spans, for `engine`, which may already be serving. `start()` attaches, `stop()` detaches, closes
    the port and flushes the spans; both may be called again safely.

        face = VllmFace(engine, served_model_name="tiny").start()
        VllmSource(face.url)            # reads face.url + "/metrics" as it would a vLLM server's
        face.stop()

    `kv_events_endpoint` adds vLLM's KV-cache events publisher
    (engine_hooks/engine/vllm_face/kv_events_publisher.py, `KvEventsPublisher(endpoint, engine)`)
    as one more observer."""

    def __init__(self, engine, served_model_name: str | None = None, host: str = "127.0.0.1",
                 port: int = 0, otlp_traces_endpoint: str | None = None,
                 kv_events_endpoint: str | None = None, *, otlp_timeout_s: float = 10.0,
                 otlp_schedule_delay_s: float = 5.0) -> None:
        self.engine = engine
        self.served_model_name = served_model_name or engine.model_names[0]
        self.host = host
        self.port = port
        self.otlp_traces_endpoint = otlp_traces_endpoint
        self.kv_events_endpoint = kv_events_endpoint
        self._otlp_timeout_s = otlp_timeout_s
        self._otlp_schedule_delay_s = otlp_schedule_delay_s
        self.metrics: VllmMetrics | None = None
        self.spans: LlmRequestSpans | None = None
        self.kv_events = None
        self._server: MetricsServer | None = None
        self._observers: list = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The base URL vLLM's server would have: `/metrics` is under it."""
        if self._server is None:
            raise RuntimeError("the face is not started")
        return self._server.url

    @property
    def started(self) -> bool:
        return self._server is not None

    def start(self) -> VllmFace:
        with self._lock:
            if self._server is not None:
                return self
            observers = []
            server = None
            try:
                metrics = VllmMetrics(self.engine, self.served_model_name)
                observers.append(metrics)
                if self.otlp_traces_endpoint:
                    observers.append(LlmRequestSpans(self.otlp_traces_endpoint,
                                                     timeout_s=self._otlp_timeout_s,
                                                     schedule_delay_s=self._otlp_schedule_delay_s))
                if self.kv_events_endpoint:
                    observers.append(_kv_events_publisher(self.kv_events_endpoint))
                server = MetricsServer(metrics.registry, self.host, self.port).start()
            except BaseException:
                for observer in observers:
                    _close(observer)
                raise
            self.metrics = metrics
            self.spans = next((o for o in observers if isinstance(o, LlmRequestSpans)), None)
            self.kv_events = observers[-1] if self.kv_events_endpoint else None
            self._observers = observers
            self._server = server
            for observer in observers:
                self.engine.add_observer(observer)
            return self

    def stop(self) -> None:
        with self._lock:
            server, self._server = self._server, None
            if server is None:
                return
            observers, self._observers = self._observers, []
            for observer in observers:
                self.engine.remove_observer(observer)
            server.stop()
            for observer in observers:
                _close(observer)

    def __enter__(self) -> VllmFace:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _kv_events_publisher(endpoint: str):
    """The KV-events publisher, not yet attached: the face adds it as an observer with the
    others."""
    from .kv_events_publisher import KvEventsPublisher

    return KvEventsPublisher(endpoint)


def _close(observer) -> None:
    close = getattr(observer, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:
        log.exception("closing %s failed", type(observer).__name__)
