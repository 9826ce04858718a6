"""End to end with the real Prometheus server: it scrapes our exposition, ingests the series and the trace-id
exemplar, loads our rules without error, and the alerts a degraded node should raise go pending or firing
while a healthy node raises none of them.

Debian's prometheus binary runs on a free loopback port with its own data directory (prometheus_support.py);
every wait has a deadline and the server is killed at teardown. Skipped only where the binary is missing outside CI.
"""

import contextlib
import pathlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.helpers.exposition import lab_frames
from tests.helpers.prometheus_support import Prometheus, alerts_by_instance, prometheus_binary

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


@contextlib.contextmanager
def serve_metrics(exporter):
    """A tiny /metrics server, negotiating the format from the scraper's Accept header like the agent's."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/metrics":
                self.send_error(404)
                return
            body, content_type = exporter.render(self.headers.get("Accept"))
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def setup(model_dir, tmp_path_factory):
    binary = prometheus_binary()
    # degraded: contiguous KV allocator (fragmentation far over 0.3) on a node whose GPU 2 is lost
    degraded_frames, timelines, degraded = lab_frames(model_dir, snapshot="tests/fixtures/nvml/gpu_lost.json",
                                                      trace_ids={"req-0": TRACE_ID})
    # healthy: paged allocator on a healthy DGX A100
    healthy_frames, _, healthy = lab_frames(model_dir, allocator="paged")
    assert degraded_frames[-1].engine.window.kv.fragmentation_ratio > 0.3
    assert healthy_frames[-1].engine.window.kv.fragmentation_ratio < 0.3
    with serve_metrics(degraded) as degraded_target, serve_metrics(healthy) as healthy_target:
        server = Prometheus(binary, tmp_path_factory.mktemp("prometheus"), [degraded_target, healthy_target])
        try:
            server.wait_for("both targets up", lambda: [t["health"] for t in server.get("/api/v1/targets")
                                                        ["activeTargets"]] == ["up", "up"])
            yield server, degraded_target, healthy_target, degraded_frames, timelines
        finally:
            server.stop()


def test_the_series_are_ingested_with_the_frames_values(setup):
    server, degraded, _, frames, _ = setup

    def fragmentation():
        result = server.get("/api/v1/query", query=f'stagelens_kv_fragmentation_ratio{{instance="{degraded}"}}')
        return result["result"]

    sample = server.wait_for("the fragmentation series", fragmentation)[0]
    assert float(sample["value"][1]) == pytest.approx(frames[-1].engine.window.kv.fragmentation_ratio)
    pairs = server.get("/api/v1/query", query="count(stagelens_gpu_topology_info)")["result"]
    assert float(pairs[0]["value"][1]) == 8 * 7 + 4 * 3   # the DGX's 8 GPUs and the other node's 4
    lost = server.get("/api/v1/query", query=f'stagelens_gpu_topology_info{{instance="{degraded}",gpu="2"}}')
    assert {s["metric"]["path"] for s in lost["result"]} == {"N/A"}   # the lost GPU's row


def test_the_trace_id_exemplar_reaches_prometheus(setup):
    server, degraded, *_ = setup

    def exemplars():
        now = time.time()
        data = server.get("/api/v1/query_exemplars", query="stagelens_scheduler_wait_seconds_bucket",
                          start=now - 600, end=now + 60)
        return [e for series in data for e in series["exemplars"]]

    found = server.wait_for("the exemplar", exemplars)
    assert {e["labels"]["trace_id"] for e in found} == {TRACE_ID}


def test_rules_load_and_evaluate_without_error(setup):
    server = setup[0]

    def evaluated():
        groups = server.get("/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return rules if all(r.get("lastEvaluation", "").startswith("20") for r in rules) else None

    rules = server.wait_for("every rule evaluated once", evaluated)
    assert [r["name"] for r in rules if r["health"] != "ok"] == []
    alerting = [r for r in rules if r["type"] == "alerting"]
    assert len(alerting) >= 20
    for rule in alerting:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["name"]
        assert pathlib.Path(rule["annotations"]["runbook_url"]).is_file(), rule["name"]


def test_the_degraded_node_raises_its_alerts_and_the_healthy_one_does_not(setup):
    server, degraded, healthy, *_ = setup
    expected = {"KVCacheFragmentationHigh": {"pending", "firing"}, "GPULost": {"firing"}}

    def raised():
        alerts = alerts_by_instance(server)
        mine = alerts.get(degraded, {})
        if all(mine.get(name) in states for name, states in expected.items()) and "Watchdog" in alerts.get("", {}):
            return alerts
        return None

    alerts = server.wait_for("the degraded node's alerts", raised)
    assert alerts[""]["Watchdog"] == "firing"
    quiet = alerts.get(healthy, {})
    for name in ("KVCacheFragmentationHigh", "GPULost", "NVLinkDown", "PCIeLinkBelowMax", "StagelensAgentDown",
                 "StagelensHookErrors", "StagelensCollectorFailing"):
        assert name not in quiet, (name, quiet)
    firing = server.get("/api/v1/query", query='ALERTS{alertname="GPULost",alertstate="firing"}')["result"]
    assert [(s["metric"]["instance"], s["metric"]["gpu"]) for s in firing] == [(degraded, "2")]
