"""`serve --engine lab --vllm-face HOST:PORT`: the bundled engine speaks vLLM's interfaces on a port of its own,
and a second agent reads it with `--engine vllm --engine-url` as it would a vLLM server, its spans received
by `--otlp-receiver`; the face stays on its port across the engine's restarts."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from stagelens.cli import main
from stagelens.commands.flags import OutsideFlags, open_engine_source
from stagelens.runtime import AgentRuntime, LabSettings
from stagelens.server.app import create_app
from tests.helpers.polling import wait_for

DGX = str(Path(__file__).parents[1] / "fixtures" / "nvml" / "dgx_a100.json")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _until(predicate):
    return wait_for(predicate, 20.0, "the outside agent to see it")


def test_an_agent_reads_the_lab_engine_through_its_vllm_face(model_dir):
    face_port, receiver_port = free_port(), free_port()
    kv_events = f"tcp://127.0.0.1:{free_port()}"
    face = {"host": "127.0.0.1", "port": face_port, "otlp_schedule_delay_s": 0.2,
            "otlp_traces_endpoint": f"http://127.0.0.1:{receiver_port}/v1/traces", "kv_events_endpoint": kv_events}
    flags = {"model": "tiny", "max_model_len": 128, "kv_cache_memory": "1MiB", "device": "cpu", "model_dir": model_dir}
    lab = AgentRuntime(interval=0.5, nvml_snapshot=DGX, lab=LabSettings(flags, None, face))
    source = open_engine_source("vllm", OutsideFlags(f"http://127.0.0.1:{face_port}",
                                                      otlp_receiver=f"127.0.0.1:{receiver_port}",
                                                      kv_events=kv_events))
    outside = AgentRuntime(interval=0.5, nvml_snapshot=DGX, engine_source=source)
    lab.start()
    outside.start()
    try:
        client = TestClient(create_app(lab, token=None))
        for i in range(4):
            assert client.post("/v1/completions", json={"prompt": "abc" * (i + 1), "max_tokens": 4}).status_code == 200
        seen = TestClient(create_app(outside, token=None))
        slowest = _until(lambda: (r := seen.get("/api/v1/requests/slowest?n=10").json()) and len(r) == 4 and r)
        assert all(t["output_tokens"] == 4 and t["latency_s"] > 0 for t in slowest)      # from the spans
        # (a frame sampled while the four requests ran counts fewer: wait for one taken after them)
        frame = _until(lambda: (f := outside.latest_frame()) and f.engine
                       and f.engine.counters.requests_finished_total == 4 and f)
        assert frame.engine.engine.source == "vllm"
        diagnosis = seen.get("/api/v1/diagnosis").json()
        provenance = {e["signal"]: e["provenance"] for s in diagnosis["stages"] for e in s["evidence"]}
        assert provenance["kv_access_efficiency"] == "not observable"
        assert provenance["memory_bandwidth_utilisation"] == "measured"
        # what came beside /metrics is counted, and the KV events' blocks reach the metrics
        # (the exposition is rendered on the sampler's next tick: the frame above may not be in it yet)
        spans_line = 'stagelens_engine_intake_total{part="traces",what="llm_request_spans"} 4.0'
        exposition = _until(lambda: (text := seen.get("/metrics").text) and spans_line in text and text)
        assert spans_line in exposition
        assert 'stagelens_engine_info{' in exposition and 'source="vllm"' in exposition
        # (a ZMQ subscriber misses what was published before it joined: these requests come after it has)
        client.post("/v1/completions", json={"prompt": "abc" * 20, "max_tokens": 4})
        frame = _until(lambda: (f := outside.latest_frame()) and f.engine and f.engine.window.kv.blocks_stored and f)
        assert frame.engine.intake["kv_events.messages"] >= 1 and frame.engine.intake["kv_events.malformed"] == 0

        # a restart with other settings keeps the face on its port
        lab.start_lab(None, {"max_num_seqs": 4})
        body = urllib.request.urlopen(f"http://127.0.0.1:{face_port}/metrics", timeout=5).read().decode()
        assert "vllm:num_requests_running" in body
    finally:
        outside.stop()
        lab.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{face_port}/metrics", timeout=2)


@pytest.mark.parametrize("argv, message", [
    (["serve", "--vllm-face", "127.0.0.1:8001"], "--vllm-face needs --engine lab"),
    (["serve", "--engine", "lab", "--vllm-face-otlp", "http://x/v1/traces"], "need --vllm-face HOST:PORT"),
    (["serve", "--engine", "lab", "--vllm-face", "8001"], "--vllm-face: expected HOST:PORT"),
    (["serve", "--engine", "lab", "--vllm-face", "127.0.0.1:8001", "--vllm-face-kv-events", "5557"],
     "--vllm-face-kv-events: expected tcp://"),
])
def test_bad_face_flags_are_one_line_and_exit_3(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--nvml-snapshot", DGX, *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 3 and message in err and len(err.strip().splitlines()) == 1, err
