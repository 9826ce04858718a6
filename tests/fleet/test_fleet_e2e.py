"""End to end, issue 17's fleet view: a real Prometheus scrapes three real `stagelens serve --engine lab` agents
(healthy, kv-fragmentation, hol-blocking) started at once, and `stagelens fleet --prometheus URL --json --once`
lists the three with their root stages and states, most severe first; one agent stopped is listed down, first.
Then what must never hang or trace back: an unreachable server, one that answers too slowly or dribbles its
answer, one that refuses the query, a malformed selector.

The tiny model on CPU: each scenario's stage fires within seconds of the agent ready, and three agents with a
Prometheus fit two shared cores. The hol-blocking node's scheduler state comes and goes with its long prompts, so
the fleet is polled (under a deadline) until one answer shows all three as their scenarios make them.
"""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from stagelens.fleet.query import FleetQuery
from tests.helpers.fleet_cli import fleet
from tests.helpers.polling import wait_for
from tests.helpers.prometheus_support import Prometheus, free_port, prometheus_binary
from tests.helpers.serve_support import ServeProcess
from tests.helpers.tcp_relay import FreezableRelay

pytestmark = pytest.mark.slow

SCENARIOS = {"healthy": (None, "ok"), "kv-fragmentation": ("kv_cache", "firing"),
             "hol-blocking": ("scheduler", "firing")}
READY_DEADLINE_S = 120   # torch import and the tiny model's weights, three at once, on a 2-core runner
SETTLE_DEADLINE_S = 60   # from Prometheus scraping all three to one answer showing each scenario's stage


@pytest.fixture(scope="module")
def lab_fleet(tmp_path_factory, model_dir):
    binary = prometheus_binary()
    workdir = tmp_path_factory.mktemp("fleet")
    agents = {scenario: ServeProcess(workdir, "--engine", "lab", "--scenario", scenario, "--model", "tiny",
                                     "--device", "cpu", "--model-dir", model_dir, "--interval", "1",
                                     "--duration", "600", "--otel-exporter", "none", name=scenario)
              for scenario in SCENARIOS}
    prometheus = None
    try:
        for agent in agents.values():
            agent.wait_ready(READY_DEADLINE_S)
        prometheus = Prometheus(binary, workdir, [a.target for a in agents.values()], rule_files=())
        prometheus.wait_for("prometheus scraping the three agents", lambda: [
            t["health"] for t in prometheus.get("/api/v1/targets")["activeTargets"]] == ["up"] * 3)
        yield prometheus, agents
    finally:
        if prometheus is not None:
            prometheus.stop()
        for agent in agents.values():
            agent.stop()


def settled(document: dict, agents: dict) -> bool:
    nodes = {node["instance"]: node for node in document["nodes"]}
    for scenario, (root, state) in SCENARIOS.items():
        node = nodes.get(agents[scenario].target)
        if node is None or node["root_stage"] != root or node["verdict"] != state:
            return False
        if root is not None and node["stages"][root]["state"] != "firing":
            return False
    return True


def test_the_fleet_lists_each_node_with_its_root_stage_then_a_stopped_one_down(lab_fleet, capsys):
    prometheus, agents = lab_fleet
    url = f"http://127.0.0.1:{prometheus.port}"
    seen: list = []

    def answer():
        code, out, err = fleet(capsys, "--prometheus", url, "--json", "--once")
        assert err == "" and code in (0, 1, 2), (code, err)
        seen[:] = [code, json.loads(out)]
        return settled(seen[1], agents)

    wait_for(answer, timeout=SETTLE_DEADLINE_S, every=0.5,
             what=f"the fleet to show each scenario's stage (last answer: {seen})")
    code, document = seen
    assert code == 2   # a node fires
    assert document["prometheus"] == url and document["error"] is None and document["fetched"]
    assert document["total"] == 3 and document["more"] == 0
    nodes = document["nodes"]
    assert [n["verdict"] for n in nodes] == ["firing", "firing", "ok"]   # most severe first, ties by instance
    assert [n["instance"] for n in nodes[:2]] == sorted(a.target for s, a in agents.items() if s != "healthy")
    by_instance = {n["instance"]: n for n in nodes}
    kv, hol, healthy = (by_instance[agents[s].target] for s in ("kv-fragmentation", "hol-blocking", "healthy"))
    assert kv["root_stage"] == "kv_cache" and kv["evidence"]["stage"] == "kv_cache"
    assert kv["evidence"]["state"] == "firing" and kv["evidence"]["value"] > 0.3   # the fragmentation ratio
    assert hol["root_stage"] == "scheduler" and hol["evidence"]["stage"] == "scheduler"
    assert {s: c["state"] for s, c in healthy["stages"].items()} == {"kv_cache": "ok", "scheduler": "ok",
                                                                     "cold_path": "ok"}
    assert healthy["evidence"] is None and healthy["root_stage"] is None
    for node in nodes:
        assert node["up"] is True and node["labels"] == {} and node["url"] == f"http://{node['instance']}"
        assert node["collector_failures"] == 0 and node["frame_stale"] is False and node["frame_age_s"] >= 0
        assert all(cell["since"] for cell in node["stages"].values())
        assert node["tail"] is None or set(node["tail"]) >= {"kv_cache", "scheduler", "cold_path"}

    # the text table says the same, one line a node, and a filter keeps the nodes it names
    code, out, _ = fleet(capsys, "--prometheus", url, "--once", "--filter", f"instance={agents['healthy'].target}")
    lines = out.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("1 node from") and lines[1].startswith("OK ")
    assert agents["healthy"].target in lines[1] and "root -" in lines[1]

    # the healthy node's agent goes away: it is down, unknown, and first
    stopped = agents["healthy"]
    stopped.stop()

    def down():
        code, out, _ = fleet(capsys, "--prometheus", url, "--json", "--once")
        seen[:] = [code, json.loads(out)]
        return not seen[1]["nodes"][0]["up"]

    wait_for(down, timeout=30, every=0.5, what=f"the stopped agent listed down (last answer: {seen})")
    code, document = seen
    first = document["nodes"][0]
    assert code == 2 and first["instance"] == stopped.target
    assert first["verdict"] == "unknown" and first["root_stage"] is None and first["evidence"] is None
    assert {c["state"] for c in first["stages"].values()} == {"unknown"}
    assert [n["up"] for n in document["nodes"]] == [False, True, True]

    # Prometheus frozen mid-watch: the refresh gives up at its deadline and keeps the last rows, marked stale
    relay = FreezableRelay(prometheus.port)
    try:
        relayed = f"http://127.0.0.1:{relay.port}"
        query = FleetQuery(relayed, timeout_s=1)
        live = query.fetch()
        assert live.error is None and len(live.rows) == 3
        relay.freeze()
        frozen = query.fetch()
        relay.thaw()
        assert frozen.stale and frozen.error == f"prometheus {relayed}: no complete answer within 1 s"
        assert frozen.rows == live.rows and frozen.fetched_unix == live.fetched_unix
        assert query.fetch().error is None   # and it recovers once the server answers again
    finally:
        relay.close()


def test_a_query_prometheus_refuses_is_one_line_exit_3(lab_fleet, capsys):
    prometheus, _ = lab_fleet
    code, out, err = fleet(capsys, "--prometheus", f"http://127.0.0.1:{prometheus.port}", "--json",
                           "--selector", '{job=~"("}')   # well-formed matchers, a regex Prometheus cannot parse
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "HTTP 400" in err and "bad_data" in err, err


def test_an_unreachable_prometheus_is_one_line_exit_3(capsys):
    code, out, err = fleet(capsys, "--prometheus", f"http://127.0.0.1:{free_port()}", "--json", "--timeout", "2")
    assert code == 3 and out == "" and "Traceback" not in err
    assert err.strip().splitlines() == [err.strip()] and "could not connect" in err, err


class Stalling(http.server.ThreadingHTTPServer):
    """Answers every request late: holds it until `release` (or 60 s), or dribbles a byte at a time meanwhile."""

    daemon_threads = True

    def __init__(self, dribble: bool) -> None:
        self.dribble, self.release, self.answered = dribble, threading.Event(), threading.Event()
        super().__init__(("127.0.0.1", 0), StallingHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class StallingHandler(http.server.BaseHTTPRequestHandler):
    server: Stalling

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            if self.server.dribble:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                end = time.monotonic() + 60
                while not self.server.release.is_set() and time.monotonic() < end:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    self.server.release.wait(0.2)
            else:
                self.server.release.wait(60)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b'{"status": "success", "data": {"resultType": "vector", "result": []}}')
            self.server.answered.set()
        except OSError:   # the client gave up: what the test expects
            pass

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("dribble", [False, True], ids=["silent", "dribbling"])
def test_a_slow_prometheus_is_one_line_exit_3_before_it_answers(dribble, capsys):
    server = Stalling(dribble)
    try:
        code, out, err = fleet(capsys, "--prometheus", f"http://127.0.0.1:{server.server_address[1]}", "--once",
                               "--timeout", "1")
        assert not server.answered.is_set()   # the command gave up while the server still held its answer
    finally:
        server.close()
    assert code == 3 and out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "no complete answer within 1 s" in err, err


@pytest.mark.parametrize("selector", ['job="stagelens"', '{job="stagelens"', '{job=stagelens}', '{job="a" cluster="b"}',
                                      '{__name__="up"}', 'up{job="stagelens"}', '{job="a"} or up'])
def test_a_malformed_selector_is_one_line_exit_3(selector, capsys):
    code, out, err = fleet(capsys, "--prometheus", f"http://127.0.0.1:{free_port()}", "--once", "--selector", selector)
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1 and "--selector" in err, err


@pytest.mark.parametrize("argv, message", [
    (["--prometheus", "prometheus:9090", "--once"], "--prometheus"),
    (["--prometheus", "http://p:9090", "--once", "--filter", "cluster"], "--filter"),
    (["--prometheus", "http://p:9090", "--once", "--limit", "0"], "--limit"),
    (["--prometheus", "http://p:9090", "--once", "--interval", "0"], "--interval"),
    (["--prometheus", "http://p:9090", "--once", "--timeout", "nan"], "--timeout"),
    (["--once"], "--prometheus"),
])
def test_bad_flags_are_one_line_exit_3(argv, message, capsys):
    code, out, err = fleet(capsys, *argv)
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err
