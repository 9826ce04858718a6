"""The fleet view's JSON document and text lines from FleetView objects built by hand, and the rows built from a
Prometheus answer written out (agent/fleet/output.py, agent/fleet/query.py): pure, no server."""

from __future__ import annotations

import json

import pytest

from stagelens.errors import UserError
from stagelens.fleet.model import Evidence, FleetView, NodeRow, stage_cells
from stagelens.fleet.output import age, fleet_document, render_fleet
from stagelens.fleet.query import build_rows, fleet_expression, matches, parse_filters, parse_selector

NOW = 1_700_000_000.0   # 2023-11-14T22:13:20Z


def firing_row() -> NodeRow:
    return NodeRow(
        "10.0.0.7:9400", {"cluster": "eu-1", "gpu": "h100"}, True, "firing", "scheduler",
        stage_cells({"kv_cache": ("ok", NOW - 3600), "scheduler": ("firing", NOW - 180),
                     "cold_path": ("warn", NOW - 45)}),
        evidence=Evidence("scheduler", "scheduler_wait_p99", "firing", 0.9, "seconds"),
        tail={"kv_cache": 0.1, "scheduler": 0.62, "cold_path": 0.0, "compute": 0.28}, frame_age_s=1.25,
        collector_failures=0, url="http://10.0.0.7:9400")


def view() -> FleetView:
    down = NodeRow("10.0.0.9:9400", {"cluster": "eu-1"}, False, "unknown", None, stage_cells({}),
                   url="http://10.0.0.9:9400")
    ok = NodeRow("10.0.0.8:9400", {}, True, "ok", None,
                 stage_cells({s: ("ok", NOW - 7200) for s in ("kv_cache", "scheduler", "cold_path")}),
                 frame_age_s=95.0, collector_failures=2, url="https://agent-8.example")
    return FleetView([down, firing_row(), ok], fetched_unix=NOW, prometheus="http://prometheus:9090")


def test_the_json_document_has_its_documented_shape():
    document = fleet_document(view())
    json.dumps(document)   # serialisable as it is
    assert list(document) == ["prometheus", "fetched", "error", "total", "more", "nodes"]
    assert document["prometheus"] == "http://prometheus:9090" and document["error"] is None
    assert document["fetched"] == "2023-11-14T22:13:20+00:00" and document["total"] == 3 and document["more"] == 0
    assert document["nodes"][1] == {
        "instance": "10.0.0.7:9400", "labels": {"cluster": "eu-1", "gpu": "h100"}, "up": True, "verdict": "firing",
        "root_stage": "scheduler",
        "stages": {"kv_cache": {"state": "ok", "since": "2023-11-14T21:13:20+00:00"},
                   "scheduler": {"state": "firing", "since": "2023-11-14T22:10:20+00:00"},
                   "cold_path": {"state": "warn", "since": "2023-11-14T22:12:35+00:00"}},
        "evidence": {"stage": "scheduler", "signal": "scheduler_wait_p99", "state": "firing", "value": 0.9,
                     "unit": "seconds"},
        "tail": {"kv_cache": 0.1, "scheduler": 0.62, "cold_path": 0.0, "compute": 0.28},
        "frame_age_s": 1.25, "frame_stale": False, "collector_failures": 0, "url": "http://10.0.0.7:9400"}
    down = document["nodes"][0]
    assert down["up"] is False and down["verdict"] == "unknown" and down["evidence"] is None and down["tail"] is None
    assert down["stages"] == {s: {"state": "unknown", "since": None} for s in ("kv_cache", "scheduler", "cold_path")}
    assert document["nodes"][2]["frame_stale"] is True and document["nodes"][2]["url"] == "https://agent-8.example"


def test_the_limit_keeps_the_most_severe_and_counts_the_rest():
    document = fleet_document(view(), limit=1)
    assert [n["instance"] for n in document["nodes"]] == ["10.0.0.9:9400"]
    assert document["total"] == 3 and document["more"] == 2
    text = render_fleet(view(), limit=1).splitlines()
    assert len(text) == 3 and text[-1] == "... and 2 more, less severe (--limit 1)"


def test_the_text_is_a_summary_then_one_line_a_node():
    lines = render_fleet(view()).splitlines()
    assert lines[0] == ("3 nodes from http://prometheus:9090 at 2023-11-14T22:13:20+00:00: "
                        "1 down, 1 firing, 0 warn, 1 ok, 0 unknown")
    down, firing, ok = lines[1:]
    assert down.split() == ["DOWN", "10.0.0.9:9400{cluster=eu-1}", "root", "-", "kv_cache", "unknown", "scheduler",
                            "unknown", "cold_path", "unknown", "|", "-", "|", "tail", "-", "|", "DOWN"]
    assert firing.startswith("FIRING  10.0.0.7:9400{cluster=eu-1,gpu=h100}  root scheduler ")
    assert "kv_cache ok 1h  scheduler firing 3m  cold_path warn 45s" in firing
    assert "|  scheduler_wait_p99 900 ms firing  |  tail scheduler 62%  |  up" in firing
    assert ok.startswith("OK      10.0.0.8:9400 ") and ok.endswith("|  -  |  tail -  |  frames stale 1m, "
                                                                     "2 collectors failing")
    # the columns line up: every node's name padded to the widest
    assert len({line.index(" root ") for line in lines[1:]}) == 1


def test_a_failed_refresh_shows_the_last_rows_stale_with_the_reason():
    last = view()
    stale = FleetView(last.rows, last.fetched_unix, "prometheus http://prometheus:9090: could not connect: refused",
                      last.prometheus)
    lines = render_fleet(stale).splitlines()
    assert lines[0] == "STALE: prometheus http://prometheus:9090: could not connect: refused"
    assert len(lines) == 5 and stale.stale
    assert fleet_document(stale)["error"].endswith("could not connect: refused")
    never = render_fleet(FleetView(error="prometheus http://p:1: could not connect: refused", prometheus="http://p:1"))
    assert never.splitlines()[1] == "0 nodes from http://p:1 at never: 0 down, 0 firing, 0 warn, 0 ok, 0 unknown"


@pytest.mark.parametrize("seconds, text", [(None, "-"), (-3, "0s"), (0, "0s"), (59.9, "59s"), (60, "1m"),
                                           (3599, "59m"), (3600, "1h"), (86400 * 3 + 5, "3d")])
def test_ages_read_in_their_largest_unit(seconds, text):
    assert age(seconds) == text


# --- from Prometheus's answer to rows ------------------------------------------------------------------------
def sample(name: str, value, instance: str = "n1:9400", **labels) -> dict:
    return {"metric": {"__name__": name, "job": "stagelens", "instance": instance, **labels},
            "value": [NOW, str(value)]}


def node(instance: str, verdict: int, states: dict, root: str | None = None, **target) -> list[dict]:
    out = [sample("up", 1, instance, **target),
           sample("stagelens_diagnosis_verdict_state", verdict, instance, **target),
           sample("stagelens_frame_timestamp_seconds", NOW - 2, instance, **target)]
    for stage, state in states.items():
        out.append(sample("stagelens_stage_state", state, instance, stage=stage, **target))
        out.append(sample("stagelens_stage_state_since_timestamp_seconds", NOW - 60, instance, stage=stage, **target))
    if root:
        out.append(sample("stagelens_root_stage_info", 1, instance, stage=root, **target))
    return out


def test_rows_are_grouped_by_instance_and_sorted_by_severity():
    answer = [
        *node("b:1", 0, {"kv_cache": 0, "scheduler": 0, "cold_path": 0}, cluster="eu"),
        *node("a:1", 1, {"kv_cache": 1, "scheduler": 0, "cold_path": 0}, "kv_cache", cluster="us"),
        *node("c:1", 2, {"kv_cache": 2, "scheduler": 1, "cold_path": -1}, "kv_cache", cluster="eu",
              stagelens_url="https://c.example"),
        sample("up", 0, "d:1", cluster="us"),
        sample("up", 1, "e:1"),   # scraped, nothing judged yet
        sample("stagelens_signal_state", 2, "c:1", stage="kv_cache", signal="kv_fragmentation_ratio", cluster="eu"),
        sample("stagelens_signal_value", 0.45, "c:1", stage="kv_cache", signal="kv_fragmentation_ratio", cluster="eu"),
        sample("stagelens_signal_state", 2, "c:1", stage="kv_cache", signal="kv_access_efficiency", cluster="eu"),
        sample("stagelens_signal_value", 0.1, "c:1", stage="kv_cache", signal="kv_access_efficiency", cluster="eu"),
        sample("stagelens_signal_state", 1, "c:1", stage="scheduler", signal="scheduler_wait_p99", cluster="eu"),
        sample("stagelens_signal_value", 9.0, "c:1", stage="scheduler", signal="scheduler_wait_p99", cluster="eu"),
        sample("stagelens_collector_success", 0, "c:1", collector="nvml", cluster="eu"),
        *[sample("stagelens_tail_share", share, "c:1", metric="ttft", percentile="99", stage=stage, cluster="eu")
          for stage, share in (("kv_cache", 0.7), ("scheduler", 0.2), ("cold_path", 0), ("compute", 0.1))],
        {"metric": {"__name__": "up"}, "value": [NOW, "1"]},   # no instance: left out
    ]
    rows = build_rows(answer)
    assert [(r.instance, r.up, r.verdict) for r in rows] == [
        ("d:1", False, "unknown"), ("c:1", True, "firing"), ("a:1", True, "warn"), ("b:1", True, "ok"),
        ("e:1", True, "unknown")]
    down, c, a = rows[0], rows[1], rows[2]
    assert down.labels == {"cluster": "us"} and down.url == "http://d:1" and down.root_stage is None
    assert c.labels == {"cluster": "eu"} and c.url == "https://c.example" and c.root_stage == "kv_cache"
    assert {s: cell.state for s, cell in c.stages.items()} == {"kv_cache": "firing", "scheduler": "warn",
                                                               "cold_path": "unknown"}
    assert c.stages["kv_cache"].since_unix == NOW - 60 and c.frame_age_s == 2 and c.collector_failures == 1
    # firing before warn, then the furthest past its threshold (access efficiency 0.1 is far below 0.6)
    assert c.evidence == Evidence("kv_cache", "kv_access_efficiency", "firing", 0.1, "ratio")
    assert c.tail == {"kv_cache": 0.7, "scheduler": 0.2, "cold_path": 0.0, "compute": 0.1}
    assert a.evidence is None and a.tail is None and a.root_stage == "kv_cache"
    assert rows[4].stages["kv_cache"].state == "unknown" and rows[4].frame_age_s is None
    assert [r.instance for r in rows if matches(r, parse_filters(["cluster=eu"]))] == ["c:1", "b:1"]
    assert [r.instance for r in rows if matches(r, parse_filters(["cluster=eu", "instance=b:1"]))] == ["b:1"]


def test_the_selector_s_matchers_go_into_every_selector_of_the_one_expression():
    matchers = parse_selector('{ job="stagelens", cluster=~"eu-.*" ,gpu!=\'a100\', }')
    assert matchers == ['job="stagelens"', 'cluster=~"eu-.*"', "gpu!='a100'"]
    expression = fleet_expression(matchers)
    assert expression.count('cluster=~"eu-.*"') == 5 == expression.count("{")
    assert parse_selector("{}") == [] and parse_selector('{job="a,b}"}') == ['job="a,b}"']
    for bad in ('job="x"', '{job=x}', '{__name__="up"}', '{job="x"} or up{}', '{job="x" a="b"}'):
        with pytest.raises(UserError, match="--selector"):
            parse_selector(bad)
