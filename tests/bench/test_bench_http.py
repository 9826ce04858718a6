"""The HTTP load generator against a real `stagelens serve --engine lab` process: it records exactly the
requests the server finished, and each point carries the server's own diagnosis."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from stagelens.cli import main
from stagelens.loadtest.http_point import metric_value
from stagelens.loadtest.point import Point, with_diagnosis
from tests.helpers.serve_api import DGX, _free_port, _wait

COUNTER = "stagelens_scheduler_finished_requests_total"
SHORT = ["--max-model-len", "256", "--prompt-len", "uniform:8:32", "--output-len", "uniform:4:16", "--duration", "2",
         "--warmup", "0.5"]


def _finished(url: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    return metric_value(text, COUNTER)


@pytest.fixture
def server(model_dir, tmp_path):
    port = _free_port()
    stagelens = str(Path(sys.executable).parent / "stagelens")
    proc = subprocess.Popen([stagelens, "--nvml-snapshot", DGX, "serve", "--engine", "lab", "--listen",
                             f"127.0.0.1:{port}", "--model", "tiny", "--max-model-len", "256", "--kv-cache-memory",
                             "2MiB", "--device", "cpu", "--model-dir", model_dir, "--interval", "0.25"],
                            stdout=subprocess.DEVNULL, stderr=(tmp_path / "serve.log").open("w"),
                            env=dict(os.environ, OTEL_TRACES_EXPORTER="none"))
    url = f"http://127.0.0.1:{port}"

    def up():
        try:
            return urllib.request.urlopen(url + "/readyz", timeout=1).status == 200
        except OSError:
            return False
    try:
        _wait(up, timeout=60)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _bench(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *args, "--no-progress"])
    out = capsys.readouterr()
    assert exit_info.value.code == 0, out.err


def _sent_and_finished(out_dir: Path) -> tuple[int, int]:
    points = json.loads((out_dir / "results.json").read_text())["points"]
    return (sum(p["extra"]["requests_sent"] for p in points),
            sum(p["extra"]["requests_finished_total"] for p in points))


def _server_saw(url: str, before: float, expected: int) -> float:
    """The server's counter moves at its sampling ticks: wait for it to settle (it must not pass `expected`)."""
    deadline = time.monotonic() + 15
    while _finished(url) - before < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.6)        # two more ticks: nothing else may arrive
    return _finished(url) - before


def test_the_load_generator_records_what_the_server_finished(server, tmp_path, capsys):
    before = _finished(server)
    _bench(capsys, "sweep", "--url", server, "--rate", "4,8", *SHORT, "--out", str(tmp_path / "open"))
    sent, finished = _sent_and_finished(tmp_path / "open")
    assert sent == finished > 0
    assert _server_saw(server, before, finished) == finished

    before = _finished(server)
    _bench(capsys, "steady", "--url", server, "--concurrency", "2", *SHORT, "--out", str(tmp_path / "closed"))
    sent, finished = _sent_and_finished(tmp_path / "closed")
    assert sent == finished > 0
    assert _server_saw(server, before, finished) == finished

    results = json.loads((tmp_path / "open" / "results.json").read_text())
    assert results["target"] == server and [p["value"] for p in results["points"]] == [4.0, 8.0]
    for p in results["points"]:
        assert p["verdict"] in ("ok", "warn", "firing")     # the server's own diagnosis
        assert p["ttft_p99_s"] is not None and 0 < p["ttft_p50_s"] <= p["latency_p50_s"]
        assert p["throughput_tokens_per_s"] > 0 and p["engine_busy_ratio"] is not None
    assert (tmp_path / "open" / "curve.png").stat().st_size > 10_000
    assert "| rate |" in (tmp_path / "open" / "report.md").read_text()


def test_without_a_diagnosis_endpoint_the_stage_is_unknown():
    point = with_diagnosis(Point(1), None)
    assert point.verdict == "unknown" and point.stage == "unknown"
    fired = with_diagnosis(Point(2), {"verdict": "firing", "root_stage": "kv_cache", "stages": [
        {"stage": "kv_cache", "state": "firing"}, {"stage": "scheduler", "state": "firing"},
        {"stage": "cold_path", "state": "warn"}]})
    assert fired.stage == "kv_cache" and fired.firing_stages == ["kv_cache", "scheduler"]
    assert fired.warn_stages == ["cold_path"]


def test_metric_value_reads_unlabelled_samples():
    text = "# HELP x y\n# TYPE x counter\nx_total 12.0\nx_total_other 3\nlabelled{a=\"b\"} 4\n"
    assert metric_value(text, "x_total") == 12.0 and metric_value(text, "labelled") is None
    assert metric_value(text, "absent") is None
