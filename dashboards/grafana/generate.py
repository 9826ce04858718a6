"""Writes the Grafana dashboards: stagelens.json, the node dashboard (the three stages side by side,
then one row per stage: KV cache, scheduler, cold path; then GPUs, topology & links, and the agent),
and stagelens-fleet.json, the fleet dashboard (nodes firing per stage and cluster from the recording
rules of group stagelens-fleet, then every node's stage states and the nodes firing longest,
narrowed by cluster, model and gpu).

Built with grafana-foundation-sdk, the Grafana 11 flavour pinned in pyproject.toml's `dev` extra
(`grafana-foundation-sdk==1769699379!11.6.0`; an unpinned install picks the 10.1 one). A dev-only
tool: nothing under agent/, probes/ or engine_hooks/ imports it. Run `python
dashboards/grafana/generate.py` after changing it and commit the three files;
tests/deploy/test_dashboard_grafana.py fails while they differ. The datasource is the import-time
input DS_PROMETHEUS (Dashboards > Import asks for it).
"""

from __future__ import annotations

import json
import pathlib

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders.common import GraphThresholdsStyleConfig, TableSortByFieldState
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from stagelens import catalogue as c
from stagelens.runbook_files import runbook_ref, stage_runbook
from stagelens.vocabulary import STAGE_ALERTS, STAGE_NAMES, STAGES

GRAFANA_VERSION = "11.6.0"   # the SDK flavour: __requires says which Grafana the JSON is for
DS = dm.DataSourceRef(type_val="prometheus", uid="${DS_PROMETHEUS}")
SEL = 'instance=~"$instance"'
# the fleet dashboard's variables: target labels a fleet's relabelling adds (a node without one
# matches "All", `.*`); not `model` or `gpu`, which the agent's own series carry (the engine's
# model, a GPU's index): Prometheus would rename those to exported_*
FLEET_LABELS = {"cluster": "Cluster", "served_model": "Model", "gpu_type": "GPU type"}
CLUSTER_SEL = 'cluster=~"$cluster"'   # the recording rules keep cluster and stage only
FLEET_SEL = ",".join(f'{label}=~"${label}"' for label in FLEET_LABELS)
# StagelensStageFiringFleetWide's share of a cluster's nodes (tests/deploy/test_dashboard_grafana.py
# keeps them equal)
FLEET_SHARE = 0.2
# stagelens_stage_state encoding
STATES = [dm.ValueMap(options={
    "-1": dm.ValueMappingResult(text="unknown", color="gray", index=0),
    "0": dm.ValueMappingResult(text="ok", color="green", index=1),
    "1": dm.ValueMappingResult(text="warn", color="orange", index=2),
    "2": dm.ValueMappingResult(text="firing", color="red", index=3)})]
STATE_STEPS = ((None, "gray"), (0, "green"), (1, "orange"), (2, "red"))
# The agent's default thresholds (agent/diagnosis/signals.py, docs/stages.md): direction, warn,
# firing. The panels colour by these; the dashed lines are the thresholds the node's agent really
# uses (stagelens_signal_threshold), which differ where an operator overrode them.
# tests/deploy/test_dashboard_grafana.py keeps these equal to the agent's.
SIGNALS = {
    "kv_fragmentation_ratio": ("above", 0.20, 0.30),
    "kv_access_efficiency": ("below", 0.75, 0.60),
    "effective_bandwidth_ratio": ("below", 0.75, 0.60),
    "scheduler_wait_p99": ("above", 0.005, 0.020),
    "head_of_line_blocking": ("above", 0.30, 0.50),
    "pcie_backpressure": ("above", 0.30, 0.50),
    "step_time_inflation": ("above", 1.20, 1.50),
    "threads_blocked_on_data": ("above", 0.10, 0.25),
}
WIDE, THIRD, HALF, QUARTER = 24, 8, 12, 6


def see(*alerts: str) -> str:
    """A panel's pointer to the runbooks of its alerts."""
    return ("Runbooks: " if len(alerts) > 1 else "Runbook: ") + ", ".join(runbook_ref(a) for a in alerts)


class Board:
    """The dashboard builder with panel ids: Grafana wants them unique within a dashboard; the
    SDK leaves them 0. Rows and panels are laid out by the SDK (a row starts below the tallest
    panel of the last line)."""

    def __init__(self, dashboard: db.Dashboard) -> None:
        self.dashboard = dashboard
        self.ids = 0

    def row(self, title: str) -> None:
        self.ids += 1
        self.dashboard.with_row(db.Row(title).id(self.ids))

    def add(self, panel) -> None:
        self.ids += 1
        self.dashboard.with_panel(panel.id(self.ids))


def q(expr: str, legend: str = "", ref: str = "A") -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)


def steps(*pairs: tuple[float | None, str]) -> db.ThresholdsConfig:
    return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
        [dm.Threshold(value=value, color=color) for value, color in pairs])


def signal_steps(signal: str) -> db.ThresholdsConfig:
    direction, warn, firing = SIGNALS[signal]
    if direction == "above":
        return steps((None, "green"), (warn, "orange"), (firing, "red"))
    return steps((None, "red"), (firing, "orange"), (warn, "green"))


def series(title: str, targets: list[prometheus.Dataquery], unit: str = "short",
           description: str = "", w: int = THIRD, h: int = 8) -> timeseries.Panel:
    return (timeseries.Panel().title(title).description(description).datasource(DS).unit(unit).span(w).height(h)
            .targets(targets))


def with_thresholds(title: str, expr: str, signal: str, unit: str, legend: str, description: str,
                    w: int = THIRD) -> timeseries.Panel:
    """A time series on the signal's default bands, with the node's warn and firing thresholds as
    dashed lines."""
    threshold = f'{c.SIGNAL_THRESHOLD.metric}{{{SEL},signal="{signal}",level="%s"}}'
    targets = [q(expr, legend), q(threshold % "warn", "warn", "B"),
               q(threshold % "firing", "firing", "C")]
    panel = (series(title, targets, unit, description, w)
             .thresholds(signal_steps(signal))
             .thresholds_style(GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.AREA)))
    for level, color in (("warn", "orange"), ("firing", "red")):
        panel.override_by_name(level, [
            dm.DynamicConfigValue(id_val="custom.lineStyle",
                                  value={"fill": "dash", "dash": [10, 10]}),
            dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": color})])
    return panel


def stage_title(stage: str) -> str:
    """A stage's name as a panel's title: "Cold path"."""
    return STAGE_NAMES[stage][0].upper() + STAGE_NAMES[stage][1:]


def stages_row(b: Board) -> None:
    b.row("Stages")
    for stage in STAGES:
        name = stage_title(stage)
        b.add(stat.Panel().title(name).datasource(DS).span(THIRD).height(4)
                     .description(f"Diagnosis state of the {name} stage; runbook: {stage_runbook(stage)}")
                     .with_target(q(f'max({c.STAGE_STATE.metric}{{{SEL},stage="{stage}"}})', name))
                     .mappings(STATES).thresholds(steps(*STATE_STEPS))
                     .color_mode(common.BigValueColorMode.BACKGROUND).graph_mode(common.BigValueGraphMode.NONE))
    b.add(statetimeline.Panel().title("Stage states").datasource(DS).span(WIDE).height(5)
                 .with_target(q(f"{c.STAGE_STATE.metric}{{{SEL}}}", "{{stage}}"))
                 .mappings(STATES).thresholds(steps(*STATE_STEPS)))


def kv_cache_row(b: Board) -> None:
    b.row("KV cache")
    b.add(with_thresholds("KV fragmentation", f"{c.KV_FRAGMENTATION.metric}{{{SEL}}}",
                                 "kv_fragmentation_ratio", "percentunit", "fragmentation",
                                 "Allocated KV slots holding no token. " + see("KVCacheFragmentationHigh")))
    b.add(with_thresholds("KV access efficiency (5m)",
                          f"instance:stagelens_kv_access_efficiency:ratio_rate5m{{{SEL}}}",
                          "kv_access_efficiency", "percentunit", "efficiency",
                          "Useful KV bytes / KV bytes moved. " + see("KVCacheAccessEfficiencyLow")))
    b.add(with_thresholds("Effective KV bandwidth", f"{c.KV_EFFECTIVE_BANDWIDTH.metric}{{{SEL}}}",
                                 "effective_bandwidth_ratio", "percentunit", "of ideal",
                                 "Useful KV bytes/s / an ideal contiguous layout for the same batch on this device."))
    b.add(series("KV blocks", [
        q(f"{c.KV_USED_BLOCKS.metric}{{{SEL}}}", "used"),
        q(f"{c.KV_FREE_BLOCKS.metric}{{{SEL}}}", "free", "B"),
        q(f"{c.KV_UNUSABLE_FREE_BLOCKS.metric}{{{SEL}}}", "free but unusable", "C")], w=HALF))
    b.add(series("Preemptions and refusals", [
        q(f"rate({c.PREEMPTIONS.metric}{{{SEL}}}[$__rate_interval])", "preempted"),
        q(f"rate({c.PREEMPTIONS_WITH_FREE_MEMORY.metric}{{{SEL}}}[$__rate_interval])",
          "preempted with memory free", "B"),
        q(f"rate({c.ALLOCATION_FAILURES.metric}{{{SEL}}}[$__rate_interval])", "refused", "C")],
        "reqps", see("KVCachePreemptionWithFreeMemory"), w=HALF))


def scheduler_row(b: Board) -> None:
    b.row("Scheduler")
    b.add(with_thresholds("Scheduler wait p99 (5m)",
                                 f"instance:stagelens_scheduler_wait_seconds:p99_rate5m{{{SEL}}}",
                                 "scheduler_wait_p99", "s", "p99",
                                 f"From the {c.WAIT_HISTOGRAM.metric} histogram. "
                                 + see("SchedulerWaitP99High")))
    b.add(heatmap.Panel().title("Scheduler wait").datasource(DS).span(THIRD).height(8).unit("s")
                 .description("Per finished request; exemplars link traces.")
                 .with_target(q(f"sum by (le) (increase({c.WAIT_HISTOGRAM.metric}_bucket{{{SEL}}}"
                                "[$__rate_interval]))", "{{le}}").format(PromQueryFormat.HEATMAP).exemplar(True))
                 .calculate(False).y_axis(heatmap.YAxisConfig().unit("s")).exemplars_color("orange"))
    b.add(with_thresholds("Head-of-line blocking", f"{c.HEAD_OF_LINE.metric}{{{SEL}}}",
                                 "head_of_line_blocking", "percentunit", "share",
                                 "Share of short requests' wait spent behind one long prefill. "
                                 + see("HeadOfLineBlocking")))
    b.add(series("Wait by reason", [q(
        f"sum by (reason) (rate({c.REQUEST_WAIT_BY_REASON.metric}{{{SEL}}}[$__rate_interval]))",
        "{{reason}}")],
        "s", "Seconds of wait per second, by the scheduler's reason.", w=HALF))
    b.add(series("Queue and budget", [
        q(f"{c.WAITING.metric}{{{SEL}}}", "waiting"),
        q(f"{c.RUNNING.metric}{{{SEL}}}", "running", "B"),
        q(f"{c.BUDGET_USE.metric}{{{SEL}}}", "budget use while waiting", "C"),
        q(f"{c.BUSY.metric}{{{SEL}}}", "busy", "D")],
        description=see("ComputeUnderusedWithQueue"), w=HALF))


def cold_path_row(b: Board) -> None:
    b.row("Cold path")
    b.add(with_thresholds("PCIe backpressure (busiest link)",
                          f"max({c.PCIE_UTILIZATION.metric}{{{SEL}}})", "pcie_backpressure",
                          "percentunit", "max",
                          "PCIe throughput / link bandwidth. " + see("PCIeBackpressure")))
    b.add(with_thresholds("Step-time inflation during loads",
                          f"{c.STEP_TIME_INFLATION.metric}{{{SEL}}}", "step_time_inflation", "none",
                          "inflation",
                          "Decode step time during loads / without. " + see("ModelLoadContention")))
    b.add(series("Model loads", [
        q(f"{c.LOADS_IN_PROGRESS.metric}{{{SEL}}}", "loading"),
        q(f"{c.WAITING_ON_MODEL.metric}{{{SEL}}}", "requests waiting on a model", "B"),
        q(f"rate({c.MODEL_LOADS.metric}{{{SEL}}}[$__rate_interval])", "loads/s", "C")],
        description=see("RequestsWaitingOnModelLoad")))
    b.add(series("Decode step time", [q(
        f"{c.DECODE_STEP_SECONDS.metric}{{{SEL}}}", "model load {{model_load}}")], "s", w=HALF))
    b.add(series("Threads blocked on data", [
        q(f"{c.PROCESS_THREADS_UNINTERRUPTIBLE_RATIO.metric}{{{SEL}}}", "engine threads in D state"),
        q(f"{c.HOST_IOWAIT.metric}{{{SEL}}}", "CPU iowait", "B")], "percentunit",
        see("ThreadsBlockedOnData"), w=HALF)
        .thresholds(signal_steps("threads_blocked_on_data"))
        .thresholds_style(GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.AREA)))


def gpus_row(b: Board) -> None:
    b.row("GPUs")
    b.add(series("GPU utilisation", [q(f"{c.GPU_UTILIZATION.metric}{{{SEL}}}", "GPU{{gpu}}")],
                        "percentunit", w=QUARTER))
    b.add(series("Memory busy", [q(f"{c.GPU_MEMORY_UTILIZATION.metric}{{{SEL}}}", "GPU{{gpu}}")],
                        "percentunit", w=QUARTER))
    b.add(series("Memory used", [q(f"{c.GPU_MEMORY_USED.metric}{{{SEL}}}", "GPU{{gpu}}")], "bytes",
                        w=QUARTER))
    b.add(series("SM clock", [q(f'{c.GPU_CLOCK.metric}{{{SEL},clock="sm"}}', "GPU{{gpu}}")],
                 "hertz", w=QUARTER))
    b.add(table.Panel().title("GPUs").datasource(DS).span(16).height(8).with_target(
        q(f"{c.GPU_INFO.metric}{{{SEL}}}").format(PromQueryFormat.TABLE).instant()))
    b.add(stat.Panel().title("Lost GPUs / throttled").datasource(DS).span(THIRD).height(8)
                 .description(see("GPULost", "GPUClocksThrottled"))
                 .targets([q(f"sum({c.GPU_LOST.metric}{{{SEL}}})", "lost"),
                           q(f'sum({c.GPU_THROTTLE_REASON.metric}{{{SEL},reason=~"hw_.*|sw_thermal_slowdown"}})',
                             "throttled", "B")])
                 .thresholds(steps((None, "green"), (1, "red"))).color_mode(common.BigValueColorMode.BACKGROUND))


def topology_row(b: Board) -> None:
    b.row("Topology & links")
    b.add(table.Panel().title("Topology (nvidia-smi topo -m)").datasource(DS).span(WIDE).height(8)
                 .description("One row per GPU pair: NV# (NVLinks), PIX, PXB, PHB, NODE or SYS.")
                 .with_target(q(f"{c.GPU_TOPOLOGY.metric}{{{SEL}}}").format(PromQueryFormat.TABLE).instant()))
    b.add(series("PCIe throughput", [q(
        f"{c.PCIE_THROUGHPUT.metric}{{{SEL}}}", "GPU{{gpu}} {{direction}}")], "Bps"))
    b.add(series("PCIe link vs maximum", [
        q(f"{c.PCIE_GENERATION.metric}{{{SEL}}}", "GPU{{gpu}} gen"),
        q(f"{c.PCIE_WIDTH.metric}{{{SEL}}}", "GPU{{gpu}} width", "B"),
        q(f"{c.PCIE_BELOW_MAX.metric}{{{SEL}}}", "GPU{{gpu}} below max", "C")],
        description=see("PCIeLinkBelowMax")))
    b.add(series("PCIe replays", [q(
        f"increase({c.PCIE_REPLAYS.metric}{{{SEL}}}[$__rate_interval])", "GPU{{gpu}}")],
        description=see("PCIeReplaysIncreasing")).thresholds(steps((None, "green"), (1, "red"))))
    b.add(series("NVLink throughput", [q(
        f"sum by (gpu, direction) ({c.NVLINK_THROUGHPUT.metric}{{{SEL}}})",
        "GPU{{gpu}} {{direction}}")], "Bps"))
    b.add(series("NVLink utilisation (busiest link per GPU)", [q(
        f"max by (gpu) ({c.NVLINK_UTILIZATION.metric}{{{SEL}}})", "GPU{{gpu}}")], "percentunit"))
    b.add(stat.Panel().title("NVLinks up").datasource(DS).span(THIRD).height(8)
                 .description(see("NVLinkDown", "NVLinkErrorsIncreasing"))
                 .targets([q(f"sum({c.NVLINK_UP.metric}{{{SEL}}})", "up"),
                           q(f"count({c.NVLINK_UP.metric}{{{SEL}}} == 0)", "down", "B"),
                           q(f"sum(increase({c.NVLINK_ERRORS.metric}{{{SEL}}}[$__rate_interval]))",
                             "errors", "C")])
                 .override_by_name("up", [dm.DynamicConfigValue(id_val="color",
                                                                value={"mode": "fixed", "fixedColor": "green"})])
                 .thresholds(steps((None, "green"), (1, "red"))))


def agent_row(b: Board) -> None:
    b.row("Agent")
    b.add(series("Collectors", [q(f"{c.COLLECTOR_SUCCESS.metric}{{{SEL}}}", "{{collector}}")],
                        description=see("StagelensCollectorFailing"), w=QUARTER, h=6)
                 .thresholds(steps((None, "red"), (1, "green"))))
    b.add(series("Collector duration",
                 [q(f"{c.COLLECTOR_DURATION.metric}{{{SEL}}}", "{{collector}}")], "s", w=QUARTER,
                 h=6))
    b.add(series("Hook errors and drops", [
        q(f"increase({c.HOOK_ERRORS.metric}{{{SEL}}}[$__rate_interval])", "hook {{hook}}"),
        q(f"increase({c.RECORDER_DROPPED.metric}{{{SEL}}}[$__rate_interval])", "dropped {{ring}}",
          "B")],
        description=see("StagelensHookErrors", "StagelensRecorderDropping"),
        w=QUARTER, h=6))
    b.add(stat.Panel().title("Frame age").datasource(DS).unit("s").span(QUARTER).height(6)
                 .description(see("StagelensFrameStale"))
                 .with_target(q(f"time() - {c.FRAME_TIMESTAMP.metric}{{{SEL}}}", "age"))
                 .thresholds(steps((None, "green"), (10, "orange"), (60, "red"))))


def links(d: db.Dashboard) -> db.Dashboard:
    """The dropdown of every stagelens dashboard, keeping the time range and the variables."""
    return d.link(db.DashboardLink("stagelens").type(dm.DashboardLinkType.DASHBOARDS).tags(["stagelens"])
                  .as_dropdown(True).include_vars(True).keep_time(True))


def build() -> db.Dashboard:
    d = (db.Dashboard("stagelens node").uid("stagelens-node").tags(["stagelens", "gpu", "llm-inference"])
         .description("The three bottleneck stages of an LLM-inference node side by side (docs/stages.md).")
         .editable().refresh("30s").time("now-1h", "now").version(1)
         .with_variable(db.QueryVariable("instance").label("Node").datasource(DS)
                        .query({"query": f"label_values({c.FRAME_TIMESTAMP.metric}, instance)",
                                "refId": "instance"})
                        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).include_all(False).multi(False))
         .annotation(db.AnnotationQuery().name("stagelens alerts").datasource(DS).enable(True).icon_color("red")
                     .expr(f'ALERTS{{alertstate="firing",{SEL}}}')))
    board = Board(links(d))
    for row in (stages_row, kv_cache_row, scheduler_row, cold_path_row, gpus_row, topology_row,
                agent_row):
        row(board)
    return d


def fleet_row(b: Board) -> None:
    """Per cluster, from the recording rules (which keep cluster and stage: model and GPU do not
    narrow these)."""
    b.row("Fleet")
    for stage in STAGES:
        b.add(stat.Panel().title(f"{stage_title(stage)}: nodes firing").datasource(DS).span(QUARTER).height(4)
              .description(f"Nodes whose {STAGE_NAMES[stage]} stage fires, in the clusters chosen. "
                           + see(STAGE_ALERTS[stage], "StagelensStageFiringFleetWide"))
              .with_target(q(f'sum(cluster:stagelens_stage_firing_nodes:count{{{CLUSTER_SEL},stage="{stage}"}})',
                             "firing"))
              .thresholds(steps((None, "green"), (1, "orange"), (3, "red")))
              .color_mode(common.BigValueColorMode.BACKGROUND).graph_mode(common.BigValueGraphMode.AREA))
    b.add(stat.Panel().title("Agents down").datasource(DS).span(QUARTER).height(4)
          .description("Nodes whose agent Prometheus cannot scrape: their stages are unobserved and count nowhere. "
                       + see("StagelensAgentDown"))
          .targets([q(f"sum(cluster:stagelens_agent_down_nodes:count{{{CLUSTER_SEL}}})", "down"),
                    q(f"sum(cluster:stagelens_nodes:count{{{CLUSTER_SEL}}})", "nodes", "B")])
          .override_by_name("nodes", [dm.DynamicConfigValue(id_val="color",
                                                            value={"mode": "fixed", "fixedColor": "text"})])
          .thresholds(steps((None, "green"), (1, "red"))).color_mode(common.BigValueColorMode.VALUE))
    b.add(series("Nodes firing per stage and cluster", [q(
        f"cluster:stagelens_stage_firing_nodes:count{{{CLUSTER_SEL}}}", "{{cluster}} {{stage}}")],
        description=f"Nodes whose stage fires ({c.STAGE_STATE.metric} == 2). "
        + see("StagelensStageFiringFleetWide"), w=HALF))
    b.add(series("Share of nodes firing per stage and cluster", [q(
        f"cluster:stagelens_stage_firing_nodes:ratio{{{CLUSTER_SEL}}}", "{{cluster}} {{stage}}")], "percentunit",
        f"Of the nodes reporting the stage. The alert fires from {FLEET_SHARE:.0%} and 3 nodes, held 5 minutes. "
        + see("StagelensStageFiringFleetWide"), w=HALF)
        .min(0).max(1).thresholds(steps((None, "green"), (FLEET_SHARE, "red")))
        .thresholds_style(GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.LINE)))
    b.add(series("Nodes warn per stage and cluster", [q(
        f"cluster:stagelens_stage_warn_nodes:count{{{CLUSTER_SEL}}}", "{{cluster}} {{stage}}")]))
    b.add(series("Root stage named, per cluster", [q(
        f"cluster:stagelens_root_stage_nodes:count{{{CLUSTER_SEL}}}", "{{cluster}} {{stage}}")],
        description="Nodes whose diagnosis names the stage the root of the chain: fix the root first."))
    b.add(series("Agents down per cluster", [
        q(f"cluster:stagelens_agent_down_nodes:count{{{CLUSTER_SEL}}}", "{{cluster}} down"),
        q(f"cluster:stagelens_nodes:count{{{CLUSTER_SEL}}}", "{{cluster}} nodes", "B")],
        description=see("StagelensAgentDown")))


def nodes_row(b: Board) -> None:
    """Node by node, narrowed by cluster, model and GPU."""
    b.row("Nodes")
    b.add(statetimeline.Panel().title("Stage state per node").datasource(DS).span(WIDE).height(12)
          .description("Every node's three stages: a change reaching the fleet shows as a wave crossing the nodes.")
          .with_target(q(f"{c.STAGE_STATE.metric}{{{FLEET_SEL}}}", "{{instance}} {{stage}}"))
          .mappings(STATES).thresholds(steps(*STATE_STEPS)))
    firing_for = (f"(time() - {c.STAGE_STATE_SINCE.metric}{{{FLEET_SEL}}})"
                  f" and ({c.STAGE_STATE.metric}{{{FLEET_SEL}}} == 2)")
    b.add(table.Panel().title("Firing longest").datasource(DS).span(HALF).height(9).unit("s")
          .description("The 10 nodes and stages firing the longest, with how long; the node opens its dashboard.")
          .with_target(q(f"topk(10, {firing_for})").format(PromQueryFormat.TABLE).instant())
          .with_transformation(dm.DataTransformerConfig(id_val="organize", options={
              "excludeByName": {"Time": True}, "renameByName": {"Value": "firing for"}}))
          .sort_by([TableSortByFieldState().display_name("firing for").desc(True)])
          .data_links([db.DashboardLink("node dashboard").type(dm.DashboardLinkType.LINK)
                       .url("/d/stagelens-node/stagelens-node?var-instance=${__data.fields.instance}"
                            "&${__url_time_range}")]))
    # the model and the GPU type
    shared = [label for label in FLEET_LABELS if label != "cluster"]
    b.add(series("Nodes firing per model and GPU", [q(
        f"count by ({', '.join(shared)}, stage) ({c.STAGE_STATE.metric}{{{FLEET_SEL}}} == 2)",
        " ".join("{{" + label + "}}" for label in (*shared, "stage")))],
        description="What the firing nodes share: one model or one GPU type points at what changed.", w=HALF, h=9))


def build_fleet() -> db.Dashboard:
    d = (db.Dashboard("stagelens fleet").uid("stagelens-fleet").tags(["stagelens", "gpu", "llm-inference"])
         .description("The three bottleneck stages across the fleet: nodes firing per stage and "
                      "cluster (docs/stages.md).")
         .editable().refresh("1m").time("now-6h", "now").version(1)
         .annotation(db.AnnotationQuery().name("fleet-wide stage alerts").datasource(DS).enable(True)
                     .icon_color("red")
                     .expr(f'ALERTS{{alertname="StagelensStageFiringFleetWide",alertstate="firing",{CLUSTER_SEL}}}')))
    narrowed: list[str] = []   # each variable offers the values left by the ones before it
    for label, title in FLEET_LABELS.items():
        metric = f"{c.STAGE_STATE.metric}{{{','.join(narrowed)}}}" if narrowed else c.STAGE_STATE.metric
        d.with_variable(db.QueryVariable(label).label(title).datasource(DS)
                        .query({"query": f"label_values({metric}, {label})", "refId": label})
                        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).include_all(True).all_value(".*")
                        .multi(True))
        narrowed.append(f'{label}=~"${label}"')
    board = Board(links(d))
    for row in (fleet_row, nodes_row):
        row(board)
    return d


def export(d: db.Dashboard) -> dict:
    """A dashboard as Grafana's import JSON: the SDK's model plus the export-only
    __inputs/__requires."""
    model = json.loads(json.dumps(d.build(), cls=JSONEncoder))
    return {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource",
                      "pluginId": "prometheus", "pluginName": "Prometheus"}],
        "__requires": [{"type": "grafana", "id": "grafana", "name": "Grafana",
                        "version": GRAFANA_VERSION},
                       {"type": "datasource", "id": "prometheus", "name": "Prometheus",
                        "version": "1.0.0"}],
        **model,
    }


def dashboard() -> dict:
    """The node dashboard, stagelens.json."""
    return export(build())


def fleet_dashboard() -> dict:
    """The fleet dashboard, stagelens-fleet.json."""
    return export(build_fleet())


if __name__ == "__main__":
    for name, make in (("stagelens.json", dashboard), ("stagelens-fleet.json", fleet_dashboard)):
        out = pathlib.Path(__file__).with_name(name)
        out.write_text(json.dumps(make(), indent=2) + "\n")
        print(f"wrote {out}")
