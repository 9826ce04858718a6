"""The fix's predicted effect where the agent offers the fix: a runtime hosting the tiny lab engine predicts the
diagnosis's fix on its recent window, off the caller's thread, and `/api/v1/diagnosis` carries it."""

import time
from pathlib import Path

from fastapi.testclient import TestClient

from stagelens.bundle import read_bundle
from stagelens.diagnosis.whole_run import judge_run
from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.runtime import AgentRuntime, LabSettings
from stagelens.server.app import create_app

FIXTURES = Path(__file__).parents[1] / "fixtures"
LAB = {"model": "tiny", "max_model_len": 256, "kv_cache_memory": "2MiB", "device": "cpu"}


def firing_diagnosis():
    """A diagnosis that recommends engine settings: the recorded hol-blocking run's."""
    bundle = read_bundle(str(FIXTURES / "bundles" / "hol-blocking.jsonl"))
    return judge_run(bundle.frames, [RequestTimeline.from_dict(t) for t in bundle.timelines]).diagnosis


def test_the_runtime_predicts_the_fix_on_its_recent_window(model_dir):
    runtime = AgentRuntime(interval=0.2, nvml_snapshot=str(FIXTURES / "nvml" / "dgx_a100.json"),
                           lab=LabSettings({**LAB, "model_dir": model_dir}, None))
    runtime.start()
    try:
        client = TestClient(create_app(runtime))
        for n in range(8):
            answer = client.post("/v1/completions", json={"prompt": "x" * (4 + 9 * n), "max_tokens": 6})
            assert answer.status_code == 200
        deadline = time.monotonic() + 30
        while (d := client.get("/api/v1/diagnosis")).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert "fix" not in d.json() or d.json()["verdict"] in ("warn", "firing")   # no fix, no prediction
        diagnosis = firing_diagnosis()
        assert runtime.predicted_fix(diagnosis) is None          # the first call starts it, never waits for it
        while (effect := runtime.predicted_fix(diagnosis)) is None:
            assert time.monotonic() < deadline, "the prediction never came"
            time.sleep(0.05)
        assert effect["set"]["enable-chunked-prefill"] is True
        before, after = effect["predicted"]["ttft_p99_s"]
        assert before > 0 and after > 0
    finally:
        runtime.stop()
