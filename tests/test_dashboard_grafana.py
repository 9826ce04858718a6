"""The Grafana dashboard: in step with its generator, every query parses (promtool) and names only metrics
the exporter really exports or the recording rules record, and the three stages sit side by side."""

import importlib.util
import json
import pathlib
import re
import subprocess

import pytest
from test_alerts_rules import recorded_names, rule_metric_names
from test_metrics_exposition import exported_metric_names, promtool

from agent.diagnosis.signals import SIGNALS_BY_ID

GRAFANA = pathlib.Path("dashboards/grafana")
DASHBOARD = json.loads((GRAFANA / "stagelens.json").read_text())
# Grafana's macros, replaced by what they expand to, so promtool can parse the query
MACROS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$instance": ".*"}


def panels(dashboard=DASHBOARD) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def exprs() -> list[str]:
    out = [t["expr"] for p in panels() for t in p.get("targets", [])]
    out += [a["expr"] for a in DASHBOARD["annotations"]["list"]]
    return out


def expand(expr: str) -> str:
    for macro, value in MACROS.items():
        expr = expr.replace(macro, value)
    return expr


def test_the_committed_json_is_what_the_generator_writes():
    spec = importlib.util.spec_from_file_location("generate", GRAFANA / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.dashboard() == DASHBOARD


def test_the_datasource_is_an_import_input():
    assert DASHBOARD["__inputs"][0]["name"] == "DS_PROMETHEUS"
    for p in panels():
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
        assert all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for t in p["targets"]), p["title"]


def test_the_three_stages_sit_side_by_side_first():
    stats = [p for p in panels() if p["type"] == "stat"][:3]
    assert [p["title"] for p in stats] == ["KV cache", "Scheduler", "Cold path"]
    assert len({p["gridPos"]["y"] for p in stats}) == 1
    for stage, p in zip(("kv_cache", "scheduler", "cold_path"), stats, strict=True):
        assert f'stage="{stage}"' in p["targets"][0]["expr"]
    heatmaps = [p for p in panels() if p["type"] == "heatmap"]
    assert heatmaps and "stagelens_scheduler_wait_seconds_bucket" in heatmaps[0]["targets"][0]["expr"]


def test_panels_do_not_overlap():
    cells = set()
    for p in panels():
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, p["title"]
                cells.add((x, y))
        assert g["x"] + g["w"] <= 24


def test_threshold_lines_are_the_agents_signals():
    signals = set(re.findall(r'signal="(\w+)"', " ".join(exprs())))
    assert signals and signals <= set(SIGNALS_BY_ID)


def test_every_query_parses(tmp_path):
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(exprs()):
        rules += [f"      - record: dashboard_query_{i}", f"        expr: {json.dumps(expand(expr))}"]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text("\n".join(rules) + "\n")
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, timeout=60)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()


@pytest.fixture(scope="module")
def exported(model_dir):
    return exported_metric_names(model_dir)


def test_every_query_names_exported_or_recorded_metrics(exported):
    text = " ".join(exprs())
    assert rule_metric_names(text) - exported == set()
    assert set(re.findall(r"\b(instance:[a-z0-9_]+:[a-z0-9_]+)", text)) <= recorded_names()
    assert len(rule_metric_names(text)) >= 40
