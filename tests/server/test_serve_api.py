"""`stagelens serve`: the HTTP API over a real runtime hosting the tiny lab engine."""

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from stagelens.diagnosis import DiagnosisConfig, load_config
from stagelens.diagnosis.config import apply_document
from stagelens.runtime import AgentRuntime, LabSettings
from stagelens.server.app import create_app
from stagelens.tracing import TraceExporter
from tests.helpers.serve_api import DGX, _free_port, _wait

LAB = {"model": "tiny", "max_model_len": 256, "kv_cache_memory": "2MiB", "device": "cpu"}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def served(tmp_path, model_dir):
    runtime = AgentRuntime(interval=0.2, nvml_snapshot=DGX, lab=LabSettings({**LAB, "model_dir": model_dir}, None))
    spans = tmp_path / "spans.jsonl"
    runtime.tracer = TraceExporter.from_env({"exporter": "jsonl", "jsonl_path": str(spans)},
                                            registry=runtime.metrics.registry)
    runtime.start()
    client = TestClient(create_app(runtime, token="s3cret"))
    _wait(lambda: client.get("/readyz").status_code == 200)
    yield client, runtime, spans
    runtime.stop()


def test_completions_stream_and_carry_the_callers_trace(served):
    client, runtime, spans = served
    r = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 5}, headers={"traceparent": TRACEPARENT})
    assert r.status_code == 200
    body = r.json()
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    assert body["choices"][0]["finish_reason"] == "length" and body["choices"][0]["text"].count(" w") == 5
    with client.stream("POST", "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 4, "stream": True}) as s:
        events = [line for line in s.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) == 4 + 2
    assert json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "length"
    request_id = body["id"]

    def root_span():
        runtime.tracer.flush(2)
        for line in spans.read_text().splitlines() if spans.exists() else []:
            span = json.loads(line)
            if span["name"] == "llm_request" and span["attributes"].get("gen_ai.request.id") == request_id:
                return span
        return None
    _wait(lambda: root_span() is not None)
    span = root_span()
    assert span["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert span["parent_span_id"] == "00f067aa0ba902b7"
    # the scheduler-wait histogram carries exemplars whose trace ids are traces really exported
    exported = {json.loads(line)["trace_id"] for line in spans.read_text().splitlines()}
    om = client.get("/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"}).text
    exemplars = re.findall(r'stagelens_scheduler_wait_seconds_bucket\{[^}]*\} \S+ # \{trace_id="([0-9a-f]+)"\}', om)
    assert exemplars and set(exemplars) <= exported


def test_metrics_plain_route_text_and_openmetrics(served):
    client, _, _ = served
    client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
    r = client.get("/metrics", follow_redirects=False)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "stagelens_stage_state{" in r.text and "stagelens_gpu_topology_info{" in r.text
    assert client.get("/metrics/", follow_redirects=False).status_code == 404    # no 307 dance
    om = client.get("/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"})
    assert om.headers["content-type"].startswith("application/openmetrics-text") and om.text.endswith("# EOF\n")


def test_read_only_api(served):
    client, _, _ = served
    for i in range(3):
        client.post("/v1/completions", json={"prompt": "abc" * (i + 1), "max_tokens": 3})
    _wait(lambda: client.get("/api/v1/requests/slowest?n=2").json())
    d = client.get("/api/v1/diagnosis").json()
    assert d["verdict"] in ("ok", "warn", "firing") and [s["stage"] for s in d["stages"]] == [
        "kv_cache", "scheduler", "cold_path"]
    topo = client.get("/api/v1/topology").json()
    assert topo["matrix"][0][1] == "NV12" and len(topo["gpus"]) == 8
    frames = client.get("/api/v1/frames").json()
    assert frames and frames[-1]["engine"]["format"] == "stagelens-engine/1"
    since = frames[-1]["time_unix"]
    assert all(f["time_unix"] > since for f in client.get(f"/api/v1/frames?since={since}").json())
    newest = client.get("/api/v1/frames?limit=1").json()
    assert len(newest) == 1 and newest[0]["time_unix"] >= frames[-1]["time_unix"]
    slow = client.get("/api/v1/requests/slowest?n=2").json()
    assert len(slow) <= 2 and all("waits" in t and "latency_s" in t for t in slow)
    assert slow == sorted(slow, key=lambda t: -t["latency_s"])
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/docs").status_code == 200 and "/api/v1/diagnosis" in client.get("/openapi.json").text


def test_the_config_route_answers_the_thresholds_the_agent_judges_with():
    config = load_config(overrides=["kv_fragmentation_ratio=0.05:0.1"])
    client = TestClient(create_app(AgentRuntime(config, nvml_snapshot=DGX), token=None))
    document = client.get("/api/v1/config").json()
    assert document["thresholds"]["kv_fragmentation_ratio"] == {"warn": 0.05, "firing": 0.1}
    served = DiagnosisConfig()
    apply_document(served, "served", document)
    assert served == config


@pytest.mark.parametrize("method, path, body, status, words", [
    ("get", "/api/v1/frames?since=-1", None, 422, "greater than or equal"),
    ("get", "/api/v1/frames?limit=0", None, 422, "greater than or equal"),
    ("get", "/api/v1/requests/slowest?n=0", None, 422, "greater than or equal"),
    ("post", "/v1/completions", {"max_tokens": 3}, 400, "prompt"),
    ("post", "/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("post", "/v1/completions", {"prompt": "x", "model": "gpt-9"}, 404, "does not exist"),
    ("post", "/v1/completions", {"prompt": [9999]}, 400, "token ids"),
])
def test_bad_requests_get_4xx_that_say_what_is_wrong(served, method, path, body, status, words):
    client, _, _ = served
    r = getattr(client, method)(path, json=body) if body is not None else getattr(client, method)(path)
    assert r.status_code == status and words in r.text


def test_state_changes_need_the_token(served):
    client, runtime, _ = served
    assert client.post("/api/v1/scenario", json={"name": "healthy"}).status_code == 401
    bad = client.post("/api/v1/scenario", json={"name": "healthy"}, headers={"authorization": "Bearer nope"})
    assert bad.status_code == 401
    auth = {"authorization": "Bearer s3cret"}
    assert client.post("/api/v1/scenario", json={"name": "nope"}, headers=auth).status_code == 422
    assert client.post("/api/v1/scenario", json={"name": "healthy", "extra": 1}, headers=auth).status_code == 422
    engine_before = runtime.lab.engine
    r = client.post("/api/v1/scenario", json={"name": None}, headers=auth)
    assert r.status_code == 200 and runtime.lab.engine is not engine_before


def test_without_a_token_state_changes_are_disabled(model_dir):
    runtime = AgentRuntime(interval=0.5, nvml_snapshot=DGX)
    client = TestClient(create_app(runtime, token=None))
    r = client.post("/api/v1/bandwidth-probe")
    assert r.status_code == 403 and "STAGELENS_TOKEN" in r.text
    assert client.post("/v1/completions", json={"prompt": "x"}).status_code == 404   # no engine hosted


def test_serve_as_a_process_answers_diagnose_connect(model_dir, tmp_path):
    port = _free_port()
    stagelens = str(Path(sys.executable).parent / "stagelens")
    env = dict(os.environ, OTEL_TRACES_EXPORTER="none")
    proc = subprocess.Popen([stagelens, "--nvml-snapshot", DGX, "serve", "--engine", "lab", "--listen",
                             f"127.0.0.1:{port}", "--scenario", "healthy", "--model", "tiny", "--max-model-len", "256",
                             "--kv-cache-memory", "2MiB", "--model-dir", model_dir, "--interval", "0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        def up():
            try:
                return urllib.request.urlopen(url + "/readyz", timeout=1).status == 200
            except OSError:
                return False
        _wait(up, timeout=60)
        out = subprocess.run([stagelens, "diagnose", "--json", "--connect", url], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode in (0, 1, 2), out.stderr
        assert json.loads(out.stdout)["stages"][0]["stage"] == "kv_cache"
        metrics = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
        assert "stagelens_scheduler_steps_total" in metrics and "_created" not in metrics
        # what-if replays the agent's recent window: its finished requests, the engine's settings and steps
        _wait(lambda: len(json.loads(urllib.request.urlopen(url + "/api/v1/whatif/window", timeout=5).read())
                          ["timelines"]) >= 3, timeout=60)
        whatif = subprocess.run([stagelens, "whatif", "--json", "--connect", url, "--set", "max-num-seqs=1"],
                                capture_output=True, text=True, timeout=60)
        assert whatif.returncode == 0, whatif.stderr
        doc = json.loads(whatif.stdout)
        assert doc["requests"] >= 3 and doc["fit"]["on"] == "steps" and doc["today"]["settings"]["model"] == "tiny"
        assert doc["candidates"][0]["set"] == {"max-num-seqs": 1}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_bad_serve_flags_fail_with_one_line():
    stagelens = str(Path(sys.executable).parent / "stagelens")
    for args, words in ((["--listen", "nowhere"], "--listen"), (["--scenario", "chain"], "--engine lab"),
                        (["--engine", "lab", "--block-size", "7"], "--block-size")):
        out = subprocess.run([stagelens, "serve", *args], capture_output=True, text=True, timeout=30)
        assert out.returncode == 3 and words in out.stderr and "Traceback" not in out.stderr
