"""The Grafana dashboards: in step with their generator (grafana-foundation-sdk, Grafana 11 flavour), every query
parses (promtool) and names only metrics the exporter really exports or the recording rules record. The node
dashboard: the three stages side by side, then one row per stage holding that stage's signals on the agent's
thresholds. The fleet dashboard: nodes firing per stage and cluster from the fleet recording rules, every node's
stage states and the nodes firing longest, narrowed by cluster, model and gpu."""

import importlib.metadata
import importlib.util
import json
import pathlib
import re
import subprocess

import pytest

from stagelens.diagnosis.signals import SIGNALS_BY_ID
from tests.helpers.alert_rules import read_alerts, recorded_names, rule_metric_names
from tests.helpers.exposition import exported_metric_names, promtool

GRAFANA = pathlib.Path("dashboards/grafana")
DASHBOARD = json.loads((GRAFANA / "stagelens.json").read_text())
FLEET = json.loads((GRAFANA / "stagelens-fleet.json").read_text())
# {committed file: the generator's function that writes it}
GENERATED = {"stagelens.json": "dashboard", "stagelens-fleet.json": "fleet_dashboard"}
BOTH = pytest.mark.parametrize("board", [DASHBOARD, FLEET], ids=["node", "fleet"])
# Grafana's macros and variables, replaced by what they expand to, so promtool can parse the query
MACROS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$instance": ".*", "$cluster": ".*",
          "$served_model": ".*", "$gpu_type": ".*"}
RECORD = r"\b((?:instance|cluster):[a-z0-9_]+:[a-z0-9_]+)"


def panels(dashboard=DASHBOARD) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def rows(dashboard=DASHBOARD) -> dict[str, list[dict]]:
    """{row title: the panels below it, up to the next row}, in order."""
    out: dict[str, list[dict]] = {}
    current = None
    for p in dashboard["panels"]:
        if p["type"] == "row":
            current = out.setdefault(p["title"], [])
        else:
            assert current is not None, f"{p['title']} sits above every row"
            current.append(p)
    return out


def threshold_signal(panel: dict) -> str | None:
    """The agent signal whose thresholds a panel draws (its stagelens_signal_threshold query), if any."""
    found = {s for t in panel["targets"] for s in re.findall(r'signal="(\w+)"', t["expr"])}
    assert len(found) <= 1, panel["title"]
    return found.pop() if found else None


def exprs(dashboard=DASHBOARD) -> list[str]:
    out = [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]
    out += [a["expr"] for a in dashboard["annotations"]["list"]]
    return out


def generator():
    spec = importlib.util.spec_from_file_location("generate", GRAFANA / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def expand(expr: str) -> str:
    for macro, value in MACROS.items():
        expr = expr.replace(macro, value)
    return expr


def test_the_committed_json_is_what_the_generator_writes():
    module = generator()
    for name, function in GENERATED.items():
        assert getattr(module, function)() == json.loads((GRAFANA / name).read_text()), \
            f"run `python dashboards/grafana/generate.py` and commit {name}"
    assert {p.name for p in GRAFANA.glob("*.json")} == set(GENERATED)


def test_the_sdk_is_the_pinned_grafana_11_flavour():
    pyproject = pathlib.Path("pyproject.toml").read_text()
    pin = re.search(r'"grafana-foundation-sdk==(\S+)"', pyproject).group(1)
    assert pin.endswith("!11.6.0")
    assert importlib.metadata.version("grafana-foundation-sdk") == pin
    for board in (DASHBOARD, FLEET):
        assert board["__requires"][0] == {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "11.6.0"}
        assert board["schemaVersion"] >= 39   # Grafana 10.4 and later


def test_the_runtime_never_imports_the_generator_or_the_sdk():
    imports = re.compile(r"^\s*(?:from|import)\s+(?:grafana_foundation_sdk|dashboards)\b|grafana/generate", re.M)
    for package in ("agent", "probes", "engine_hooks"):
        for path in pathlib.Path(package).rglob("*.py"):
            assert not imports.search(path.read_text()), path


@BOTH
def test_the_datasource_is_an_import_input(board):
    assert board["__inputs"][0]["name"] == "DS_PROMETHEUS"
    for p in panels(board):
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


def test_one_row_per_stage_then_topology_and_links():
    titles = list(rows())
    assert titles[:4] == ["Stages", "KV cache", "Scheduler", "Cold path"]
    assert "Topology & links" in titles
    assert DASHBOARD["panels"][0]["type"] == "row" and not any(p.get("collapsed") for p in DASHBOARD["panels"])
    topology = " ".join(t["expr"] for p in rows()["Topology & links"] for t in p["targets"])
    for metric in ("stagelens_gpu_topology_info", "stagelens_pcie_link_below_max", "stagelens_nvlink_up"):
        assert metric in topology


def test_each_stage_row_holds_that_stages_signals_on_the_agents_thresholds():
    for title, stage in (("KV cache", "kv_cache"), ("Scheduler", "scheduler"), ("Cold path", "cold_path")):
        signals = [s for p in rows()[title] if (s := threshold_signal(p))]
        assert len(signals) >= 2, title
        assert {SIGNALS_BY_ID[s].stage for s in signals} == {stage}, title
    for p in panels():
        if (signal := threshold_signal(p)) is None:
            continue
        s = SIGNALS_BY_ID[signal]
        steps = p["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert steps[0]["value"] is None and [st["value"] for st in steps[1:]] == sorted([s.warn, s.firing]), p
        worst = steps[-1] if s.direction == "above" else steps[0]
        assert worst["color"] == "red", p["title"]
        assert p["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off", p["title"]


def test_the_stage_stats_colour_by_state():
    for p in [p for p in panels() if p["type"] == "stat"][:3]:
        defaults = p["fieldConfig"]["defaults"]
        assert {k: v["text"] for k, v in defaults["mappings"][0]["options"].items()} == {
            "-1": "unknown", "0": "ok", "1": "warn", "2": "firing"}
        assert [(s["value"], s["color"]) for s in defaults["thresholds"]["steps"]][-1] == (2, "red")
        assert p["options"]["colorMode"] == "background"


@BOTH
def test_panel_ids_are_unique(board):
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and 0 not in ids


@BOTH
def test_panels_do_not_overlap(board):
    cells = set()
    for p in board["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, p["title"]
                cells.add((x, y))
        assert g["x"] + g["w"] <= 24


def test_threshold_lines_are_the_agents_signals():
    signals = set(re.findall(r'signal="(\w+)"', " ".join(exprs())))
    assert signals and signals <= set(SIGNALS_BY_ID)


@BOTH
def test_every_query_parses(board, tmp_path):
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(exprs(board)):
        rules += [f"      - record: dashboard_query_{i}", f"        expr: {json.dumps(expand(expr))}"]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text("\n".join(rules) + "\n")
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, timeout=60)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()


@pytest.fixture(scope="module")
def exported(model_dir):
    return exported_metric_names(model_dir)


@BOTH
def test_every_query_names_exported_or_recorded_metrics(board, exported):
    text = " ".join(exprs(board))
    assert rule_metric_names(text) - exported == set()
    assert set(re.findall(RECORD, text)) <= recorded_names()
    assert len(rule_metric_names(text)) >= (40 if board is DASHBOARD else 2)


def fleet_rows() -> dict[str, list[dict]]:
    return rows(FLEET)


def test_the_fleet_is_narrowed_by_cluster_model_and_gpu():
    variables = {v["name"]: v for v in FLEET["templating"]["list"]}
    assert list(variables) == ["cluster", "served_model", "gpu_type"]
    for v in variables.values():
        assert v["multi"] and v["includeAll"] and v["allValue"] == ".*"   # "All" matches nodes without the label
        assert v["query"]["query"].startswith("label_values(stagelens_stage_state")
    assert 'cluster=~"$cluster"' in variables["served_model"]["query"]["query"]
    # per node: every query takes the three; per cluster (the recording rules keep cluster and stage): the cluster
    for p in fleet_rows()["Nodes"]:
        for t in p["targets"]:
            for label in variables:
                assert t["expr"].count(f'{label}=~"${label}"') == t["expr"].count("{"), (p["title"], label)
    for p in fleet_rows()["Fleet"]:
        for t in p["targets"]:
            assert re.fullmatch(r"(sum\()?cluster:\w+:\w+\{cluster=~\"\$cluster\"(,stage=\"\w+\")?\}\)?", t["expr"]), t


def test_the_fleet_counts_come_from_the_fleet_recording_rules():
    fleet_records = {r for r in recorded_names() if r.startswith("cluster:")}
    used = set(re.findall(RECORD, " ".join(exprs(FLEET))))
    assert used == fleet_records
    stats = [p for p in fleet_rows()["Fleet"] if p["type"] == "stat"][:3]
    for stage, p in zip(("kv_cache", "scheduler", "cold_path"), stats, strict=True):
        assert p["targets"][0]["expr"] == \
            f'sum(cluster:stagelens_stage_firing_nodes:count{{cluster=~"$cluster",stage="{stage}"}})'
    assert len({p["gridPos"]["y"] for p in stats}) == 1


def test_the_fleet_share_draws_the_alerts_threshold():
    expr = read_alerts()["StagelensStageFiringFleetWide"]["expr"]
    share = float(re.search(r"cluster:stagelens_stage_firing_nodes:ratio >= ([0-9.]+)", expr).group(1))
    [panel] = [p for p in panels(FLEET) if "stagelens_stage_firing_nodes:ratio" in p["targets"][0]["expr"]]
    assert [s["value"] for s in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]] == [None, share]
    assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"
    assert f"{share:.0%}" in panel["description"]


def test_the_fleet_timeline_and_the_nodes_firing_longest():
    [timeline] = [p for p in panels(FLEET) if p["type"] == "state-timeline"]
    assert re.fullmatch(r"stagelens_stage_state\{[^}]*\}", timeline["targets"][0]["expr"])
    assert "{{instance}}" in timeline["targets"][0]["legendFormat"]
    assert {k: v["text"] for k, v in timeline["fieldConfig"]["defaults"]["mappings"][0]["options"].items()} == {
        "-1": "unknown", "0": "ok", "1": "warn", "2": "firing"}
    [longest] = [p for p in panels(FLEET) if p["type"] == "table"]
    expr = longest["targets"][0]["expr"]
    assert expr.startswith("topk(") and "time() - stagelens_stage_state_since_timestamp_seconds" in expr
    assert re.search(r"stagelens_stage_state\{[^}]*\} == 2", expr)
    assert longest["targets"][0]["instant"] and longest["fieldConfig"]["defaults"]["unit"] == "s"
    assert "/d/stagelens-node/" in longest["fieldConfig"]["defaults"]["links"][0]["url"]
    assert DASHBOARD["uid"] == "stagelens-node" and FLEET["uid"] == "stagelens-fleet"
