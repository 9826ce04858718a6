"""One registry for the agent: the scrape-time collector plus the per-request wait metrics."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from stagelens.metrics.collector import StagelensCollector
from stagelens.metrics.exposition import render
from stagelens.metrics.waits import WaitMetrics


class MetricsExporter:
    """`latest_frame()` / `latest_diagnosis()` are read at each scrape; add `on_frame` as a
    sampler listener."""

    def __init__(self, latest_frame: Callable[[], object], latest_diagnosis: Callable[[], object] = lambda: None,
                 trace_id_for: Callable[[object], str | None] | None = None, vllm_names: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.collector = StagelensCollector(latest_frame, latest_diagnosis)
        self.registry.register(self.collector)
        self.waits = WaitMetrics(self.registry, trace_id_for, vllm_names)
        self._latest_frame = latest_frame
        # accept header -> (frame, body, content type)
        self._cache: dict[str, tuple[object, bytes, str]] = {}
        # accept header -> when a scraper last asked
        self._asked: dict[str, float] = {}
        # accept header -> renders under way
        self._rendering: dict[str, int] = {}
        self._lock = threading.Lock()

    def on_frame(self, frame, timelines: list) -> None:
        self.waits.on_frame(frame, timelines)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition as of the latest frame. Everything in it changes only when a frame
        arrives (the trace counters excepted, which lag by at most one interval), so each frame
        is rendered once per format and scrapes in between are served from that rendering. A
        scrape arriving while the page is being rendered gets the previous one rather than wait."""
        return self._rendered(self._asking(accept))

    def ready(self, accept: str | None = None) -> tuple[bytes, str] | None:
        """`render`'s page when it needs no rendering: the latest frame's once rendered, or the
        previous one while a render is under way (a scrape never waits on one); None when there
        is none to give yet. Cheap enough for an event loop."""
        key = self._asking(accept)
        with self._lock:
            return self._ready(key, self._latest_frame())

    def _asking(self, accept: str | None) -> str:
        key = accept or ""
        if len(self._asked) > 8:
            self._asked.clear()
        self._asked[key] = time.monotonic()
        return key

    def prerender(self, recent_s: float = 60.0) -> None:
        """Render the latest frame now (on the sampler's thread) in every format a scraper asked
        for in the last `recent_s`: a regular scrape then reads a finished page instead of
        building one."""
        now = time.monotonic()
        for key, asked in list(self._asked.items()):
            if now - asked <= recent_s:
                self._rendered(key)

    def _ready(self, key: str, frame) -> tuple[bytes, str] | None:
        cached = self._cache.get(key)
        if cached is None:
            return None
        if (cached[0] is frame and frame is not None) or self._rendering.get(key):
            return cached[1], cached[2]
        return None

    def _rendered(self, key: str) -> tuple[bytes, str]:
        frame = self._latest_frame()
        with self._lock:
            page = self._ready(key, frame)
            if page is not None:
                return page
            self._rendering[key] = self._rendering.get(key, 0) + 1
        try:
            body, content_type = render(self.registry, key or None)
        finally:
            with self._lock:
                self._rendering[key] -= 1
                if not self._rendering[key]:
                    del self._rendering[key]
        with self._lock:
            if len(self._cache) > 8:
                self._cache.clear()
            self._cache[key] = (frame, body, content_type)
        return body, content_type
