"""Issue 24: `/metrics` never waits. A scrape during a render gets the previous page, a ready page is
served from the event loop itself (no hop to a worker thread, which waited on the GIL behind the intake's
decoding), and `serve` shortens the GIL's switch interval so the loop gets it back quickly."""

from __future__ import annotations

import asyncio
import sys
import threading
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from stagelens.cli import run
from stagelens.metrics import MetricsExporter
from stagelens.server.app import create_app

DEADLINE_S = 10.0


class _Pages:
    """Stands for the exposition's render: page N for the Nth call, each waiting for `go` while it is unset."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.go = threading.Event()
        self.go.set()

    def __call__(self, registry, accept=None) -> tuple[bytes, str]:
        self.calls += 1
        page = b"page %d\n" % self.calls
        self.started.set()
        assert self.go.wait(DEADLINE_S), "the render was never let go"
        return page, "text/plain; version=0.0.4; charset=utf-8"


@pytest.fixture
def pages(monkeypatch) -> _Pages:
    pages = _Pages()
    monkeypatch.setattr("stagelens.metrics.exporter.render", pages)
    return pages


def _in_thread(call):
    """call() on another thread; its result, or None when it has not returned within DEADLINE_S."""
    out = []
    worker = threading.Thread(target=lambda: out.append(call()), daemon=True)
    worker.start()
    worker.join(DEADLINE_S)
    return out[0] if out else None


def test_a_scrape_while_the_page_is_rendered_gets_the_previous_page_without_waiting(pages):
    frames = [object()]
    exporter = MetricsExporter(lambda: frames[-1])
    assert exporter.render()[0] == b"page 1\n"
    frames.append(object())                              # a new frame: its page is being rendered, slowly
    pages.go.clear()
    pages.started.clear()
    rendering = threading.Thread(target=exporter.prerender, daemon=True)
    rendering.start()
    try:
        assert pages.started.wait(DEADLINE_S)
        assert exporter.ready()[0] == b"page 1\n"
        assert _in_thread(exporter.render)[0] == b"page 1\n", "a scrape waited on the render under way"
    finally:
        pages.go.set()
        rendering.join(DEADLINE_S)
    assert exporter.ready()[0] == b"page 2\n" and pages.calls == 2


def test_no_page_is_ready_before_the_first_render_nor_for_a_frame_not_rendered_yet(pages):
    frames = [object()]
    exporter = MetricsExporter(lambda: frames[-1])
    assert exporter.ready() is None
    exporter.render()
    frames.append(object())
    assert exporter.ready() is None                      # the previous frame's page is stale, no render is under way
    assert exporter.render()[0] == b"page 2\n"


def test_a_ready_page_is_served_from_the_event_loop(pages):
    frames = [object()]
    exporter = MetricsExporter(lambda: frames[-1])
    on_the_loop: list[bool] = []

    def ready(accept=None):
        try:
            asyncio.get_running_loop()
            on_the_loop.append(True)
        except RuntimeError:                             # a worker thread has no running loop
            on_the_loop.append(False)
        return MetricsExporter.ready(exporter, accept)

    exporter.ready = ready
    with TestClient(create_app(SimpleNamespace(metrics=exporter))) as client:
        first, second = client.get("/metrics"), client.get("/metrics")
    assert first.status_code == second.status_code == 200
    assert first.content == second.content == b"page 1\n"      # the first rendered, the second served as is
    assert pages.calls == 1
    assert on_the_loop == [True, True]


def test_serve_hands_the_gil_back_every_millisecond_where_intake_threads_run_not_beside_a_lab_engine():
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        assert run(["serve", "--engine", "lab", "--listen", "nowhere"]) == 3    # refused, after the setting
        assert sys.getswitchinterval() == pytest.approx(0.005)               # the engine's step loop keeps it
        assert run(["serve", "--scenario", "chain"]) == 3
        assert sys.getswitchinterval() == pytest.approx(0.001)
    finally:
        sys.setswitchinterval(before)
