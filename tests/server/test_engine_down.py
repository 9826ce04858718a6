"""If the engine's loop dies anyway (past its step barrier), every surface tells the truth at once:
`/readyz` 503 with the reason, `/v1/completions` 503 without waiting, the diagnosis has no verdict and
says why (`diagnose --connect` exits 3), the metrics say the engine is down, the TUI shows ENGINE DOWN."""

import subprocess
import threading
import time

import pytest
import uvicorn
from fastapi.testclient import TestClient

from stagelens.runtime import AgentRuntime, LabSettings
from stagelens.server.app import create_app
from stagelens.tui.app import StagelensApp
from stagelens.tui.feed import Poll
from stagelens.tui.messages import Polled
from tests.helpers.prometheus_support import free_port
from tests.helpers.serve_support import DGX, stagelens_command
from tests.helpers.tui_pilot import FakeFeed
from tests.helpers.tui_support import text_of


@pytest.fixture(scope="module")
def dead(tmp_path_factory):
    """A runtime whose lab engine served one request, then had its loop break."""
    model_dir = str(tmp_path_factory.mktemp("models"))
    runtime = AgentRuntime(interval=0.2, nvml_snapshot=str(DGX), lab=LabSettings(
        {"model": "tiny", "max_model_len": 256, "kv_cache_memory": "2MiB", "device": "cpu", "model_dir": model_dir},
        None))
    runtime.start()
    client = TestClient(create_app(runtime, token=None))
    assert client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 200
    engine = runtime.lab.engine

    def broken():
        raise MemoryError("injected: the engine loop breaks")
    engine.scheduler.has_work = broken
    engine.abort("wake-up")
    deadline = time.monotonic() + 10
    while engine.failure is None or runtime.latest_diagnosis().verdict != "unknown":
        assert time.monotonic() < deadline, "the engine did not die"
        time.sleep(0.05)
    yield runtime, client
    runtime.stop()


def test_readyz_and_completions_answer_503_with_the_reason_at_once(dead):
    _, client = dead
    ready = client.get("/readyz")
    assert ready.status_code == 503 and "down: MemoryError" in ready.json()["detail"]
    started = time.monotonic()
    r = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    assert r.status_code == 503 and "MemoryError" in r.json()["error"]["message"]
    assert time.monotonic() - started < 5


def test_the_diagnosis_has_no_verdict_and_the_metrics_say_down(dead):
    _, client = dead
    d = client.get("/api/v1/diagnosis").json()
    assert d["verdict"] == "unknown" and d["root_stage"] is None
    assert d["unavailable"].startswith("the engine is down: MemoryError")
    metrics = client.get("/metrics").text
    assert "stagelens_engine_up 0.0" in metrics


def test_diagnose_connect_exits_unknown_with_the_reason(dead):
    runtime, _ = dead
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(runtime), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        out = subprocess.run([*stagelens_command(), "diagnose", "--connect", f"http://127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=60)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert out.returncode == 3, out
    assert "the engine is down: MemoryError" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.asyncio
async def test_the_tui_shows_engine_down(dead):
    runtime, _ = dead
    app = StagelensApp(FakeFeed(kind="remote", can_fix=False), autopoll=False)
    async with app.run_test(size=(160, 48)) as pilot:
        app.post_message(Polled(Poll(runtime.frames(None)[-5:])))
        await pilot.pause()
        screen = text_of(app)
    assert "ENGINE DOWN" in screen and "the engine is down: MemoryError" in screen
