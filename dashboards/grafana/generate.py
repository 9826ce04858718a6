"""Writes stagelens.json, the Grafana node dashboard: the three stages side by side, then GPUs, links, agent.

Run `python dashboards/grafana/generate.py` after changing it and commit both files. Plain dicts in
Grafana's dashboard JSON model (schemaVersion 39, Grafana 10/11); the datasource is the import-time
input DS_PROMETHEUS.
"""

from __future__ import annotations

import json
import pathlib

DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
SEL = 'instance=~"$instance"'
STATES = [  # stagelens_stage_state encoding
    {"type": "value", "options": {"-1": {"text": "unknown", "color": "gray", "index": 0},
                                  "0": {"text": "ok", "color": "green", "index": 1},
                                  "1": {"text": "warn", "color": "orange", "index": 2},
                                  "2": {"text": "firing", "color": "red", "index": 3}}}]
STAGES = (("kv_cache", "KV cache", "KVCacheStageFiring"), ("scheduler", "Scheduler", "SchedulerStageFiring"),
          ("cold_path", "Cold path", "ColdPathStageFiring"))


class Layout:
    def __init__(self) -> None:
        self.panels: list[dict] = []
        self.y = 0
        self.ids = 0

    def row(self, title: str) -> None:
        self.ids += 1
        self.panels.append({"type": "row", "title": title, "id": self.ids, "collapsed": False,
                            "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1}, "panels": []})
        self.y += 1

    def line(self, panels: list[dict], height: int = 8) -> None:
        """Panels side by side across the full width."""
        width = 24 // len(panels)
        for i, panel in enumerate(panels):
            self.ids += 1
            panel["id"] = self.ids
            panel["gridPos"] = {"x": i * width, "y": self.y, "w": width, "h": height}
            self.panels.append(panel)
        self.y += height


def target(expr: str, legend: str = "", ref: str = "A", **extra) -> dict:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref, **extra}


def panel(kind: str, title: str, targets: list[dict], unit: str = "short", description: str = "", **extra) -> dict:
    return {"type": kind, "title": title, "description": description, "datasource": DS, "targets": targets,
            "fieldConfig": {"defaults": {"unit": unit, **extra.pop("defaults", {})}, "overrides": []},
            "options": extra.pop("options", {}), **extra}


def with_thresholds(title: str, expr: str, signal: str, unit: str, legend: str, description: str) -> dict:
    """A time series with the agent's warn and firing thresholds of `signal` drawn as dashed lines."""
    threshold = f'stagelens_signal_threshold{{{SEL},signal="{signal}",level="%s"}}'
    dashed = {"custom.lineStyle": {"fill": "dash", "dash": [10, 10]}}
    overrides = [{"matcher": {"id": "byName", "options": level},
                  "properties": [{"id": k, "value": v} for k, v in dashed.items()]
                  + [{"id": "color", "value": {"mode": "fixed", "fixedColor": color}}]}
                 for level, color in (("warn", "orange"), ("firing", "red"))]
    p = panel("timeseries", title, [target(expr, legend),
                                    target(threshold % "warn", "warn", "B"),
                                    target(threshold % "firing", "firing", "C")], unit, description)
    p["fieldConfig"]["overrides"] = overrides
    return p


def stage_panels(layout: Layout) -> None:
    layout.row("Stages")
    layout.line([panel("stat", name, [target(f'max(stagelens_stage_state{{{SEL},stage="{stage}"}})', name)],
                       description=f"Diagnosis state of the {name} stage; runbook: runbooks/{alert}.md",
                       defaults={"mappings": STATES}, options={"colorMode": "background", "graphMode": "none"})
                 for stage, name, alert in STAGES], height=4)
    layout.line([panel("state-timeline", "Stage states", [target(f"stagelens_stage_state{{{SEL}}}", "{{stage}}")],
                       defaults={"mappings": STATES})], height=5)
    layout.row("KV cache | Scheduler | Cold path")
    layout.line([
        with_thresholds("KV fragmentation", f"stagelens_kv_fragmentation_ratio{{{SEL}}}", "kv_fragmentation_ratio",
                        "percentunit", "fragmentation", "Allocated KV slots holding no token."),
        with_thresholds("Scheduler wait p99 (5m)", f"instance:stagelens_scheduler_wait_seconds:p99_rate5m{{{SEL}}}",
                        "scheduler_wait_p99", "s", "p99", "From the stagelens_scheduler_wait_seconds histogram."),
        with_thresholds("PCIe backpressure (busiest link)", f"max(stagelens_pcie_utilization_ratio{{{SEL}}})",
                        "pcie_backpressure", "percentunit", "max", "PCIe throughput / link bandwidth."),
    ])
    layout.line([
        with_thresholds("KV access efficiency (5m)", f"instance:stagelens_kv_access_efficiency:ratio_rate5m{{{SEL}}}",
                        "kv_access_efficiency", "percentunit", "efficiency", "Useful KV bytes / KV bytes moved."),
        panel("heatmap", "Scheduler wait", [target(
            f"sum by (le) (increase(stagelens_scheduler_wait_seconds_bucket{{{SEL}}}[$__rate_interval]))",
            "{{le}}", format="heatmap", exemplar=True)], "s", "Per finished request; exemplars link traces.",
            options={"calculate": False, "yAxis": {"unit": "s"}, "exemplars": {"color": "orange"}}),
        with_thresholds("Step-time inflation during loads", f"stagelens_cold_path_step_time_inflation{{{SEL}}}",
                        "step_time_inflation", "none", "inflation", "Decode step time during loads / without."),
    ])
    layout.line([
        with_thresholds("Effective KV bandwidth", f"stagelens_kv_effective_bandwidth_ratio{{{SEL}}}",
                        "effective_bandwidth_ratio", "percentunit", "of ideal",
                        "Useful KV bytes/s / an ideal contiguous layout for the same batch on this device."),
        with_thresholds("Head-of-line blocking", f"stagelens_scheduler_head_of_line_ratio{{{SEL}}}",
                        "head_of_line_blocking", "percentunit", "share",
                        "Share of short requests' wait spent behind one long prefill."),
        panel("timeseries", "Model loads", [
            target(f"stagelens_model_loads_in_progress{{{SEL}}}", "loading"),
            target(f"stagelens_cold_path_waiting_on_model_requests{{{SEL}}}", "requests waiting on a model", "B"),
            target(f"rate(stagelens_model_loads_total{{{SEL}}}[$__rate_interval])", "loads/s", "C")]),
    ])
    layout.line([
        panel("timeseries", "KV blocks", [
            target(f"stagelens_kv_cache_used_blocks{{{SEL}}}", "used"),
            target(f"stagelens_kv_cache_free_blocks{{{SEL}}}", "free", "B"),
            target(f"stagelens_kv_cache_unusable_free_blocks{{{SEL}}}", "free but unusable", "C")]),
        panel("timeseries", "Wait by reason", [target(
            f"sum by (reason) (rate(stagelens_request_wait_seconds_total{{{SEL}}}[$__rate_interval]))", "{{reason}}")],
            "s", "Seconds of wait per second, by the scheduler's reason."),
        panel("timeseries", "Decode step time", [target(
            f"stagelens_cold_path_decode_step_seconds{{{SEL}}}", "model load {{model_load}}")], "s"),
    ])
    layout.line([
        panel("timeseries", "Preemptions and refusals", [
            target(f"rate(stagelens_scheduler_preemptions_total{{{SEL}}}[$__rate_interval])", "preempted"),
            target(f"rate(stagelens_scheduler_preemptions_with_free_memory_total{{{SEL}}}[$__rate_interval])",
                   "preempted with memory free", "B"),
            target(f"rate(stagelens_scheduler_allocation_failures_total{{{SEL}}}[$__rate_interval])", "refused", "C")],
            "reqps"),
        panel("timeseries", "Queue and budget", [
            target(f"stagelens_scheduler_waiting_requests{{{SEL}}}", "waiting"),
            target(f"stagelens_scheduler_running_requests{{{SEL}}}", "running", "B"),
            target(f"stagelens_scheduler_budget_use_ratio{{{SEL}}}", "budget use while waiting", "C"),
            target(f"stagelens_scheduler_busy_ratio{{{SEL}}}", "busy", "D")]),
        panel("timeseries", "Threads blocked on data", [
            target(f"stagelens_process_threads_uninterruptible_ratio{{{SEL}}}", "engine threads in D state"),
            target(f"stagelens_host_cpu_iowait_ratio{{{SEL}}}", "CPU iowait", "B")], "percentunit"),
    ])


def node_panels(layout: Layout) -> None:
    layout.row("GPUs")
    layout.line([
        panel("timeseries", "GPU utilisation", [target(f"stagelens_gpu_utilization_ratio{{{SEL}}}", "GPU{{gpu}}")],
              "percentunit"),
        panel("timeseries", "Memory busy", [target(f"stagelens_gpu_memory_utilization_ratio{{{SEL}}}",
                                                   "GPU{{gpu}}")], "percentunit"),
        panel("timeseries", "Memory used", [target(f"stagelens_gpu_memory_used_bytes{{{SEL}}}", "GPU{{gpu}}")],
              "bytes"),
        panel("timeseries", "SM clock", [target(f'stagelens_gpu_clock_hertz{{{SEL},clock="sm"}}', "GPU{{gpu}}")],
              "hertz"),
    ])
    layout.line([
        panel("table", "GPUs", [target(f"stagelens_gpu_info{{{SEL}}}", format="table", instant=True)]),
        panel("table", "Topology (nvidia-smi topo -m)",
              [target(f"stagelens_gpu_topology_info{{{SEL}}}", format="table", instant=True)]),
        panel("stat", "Lost GPUs / throttled", [
            target(f"sum(stagelens_gpu_lost{{{SEL}}})", "lost"),
            target(f'sum(stagelens_gpu_throttle_reason{{{SEL},reason=~"hw_.*|sw_thermal_slowdown"}})', "throttled",
                   "B")]),
    ])
    layout.row("Links")
    layout.line([
        panel("timeseries", "PCIe throughput", [target(
            f"stagelens_pcie_throughput_bytes_per_second{{{SEL}}}", "GPU{{gpu}} {{direction}}")], "Bps"),
        panel("timeseries", "PCIe link vs maximum", [
            target(f"stagelens_pcie_link_generation{{{SEL}}}", "GPU{{gpu}} gen"),
            target(f"stagelens_pcie_link_width_lanes{{{SEL}}}", "GPU{{gpu}} width", "B"),
            target(f"stagelens_pcie_link_below_max{{{SEL}}}", "GPU{{gpu}} below max", "C")]),
        panel("timeseries", "PCIe replays", [target(
            f"increase(stagelens_pcie_replays_total{{{SEL}}}[$__rate_interval])", "GPU{{gpu}}")]),
    ])
    layout.line([
        panel("timeseries", "NVLink throughput", [target(
            f"sum by (gpu, direction) (stagelens_nvlink_throughput_bytes_per_second{{{SEL}}})",
            "GPU{{gpu}} {{direction}}")], "Bps"),
        panel("timeseries", "NVLink utilisation (busiest link per GPU)", [target(
            f"max by (gpu) (stagelens_nvlink_utilization_ratio{{{SEL}}})", "GPU{{gpu}}")], "percentunit"),
        panel("stat", "NVLinks up", [
            target(f"sum(stagelens_nvlink_up{{{SEL}}})", "up"),
            target(f"count(stagelens_nvlink_up{{{SEL}}} == 0)", "down", "B"),
            target(f"sum(increase(stagelens_nvlink_errors_total{{{SEL}}}[$__rate_interval]))", "errors", "C")]),
    ])
    layout.row("Agent")
    layout.line([
        panel("timeseries", "Collectors", [target(f"stagelens_collector_success{{{SEL}}}", "{{collector}}")]),
        panel("timeseries", "Collector duration", [target(
            f"stagelens_collector_duration_seconds{{{SEL}}}", "{{collector}}")], "s"),
        panel("timeseries", "Hook errors and drops", [
            target(f"increase(stagelens_hook_errors_total{{{SEL}}}[$__rate_interval])", "hook {{hook}}"),
            target(f"increase(stagelens_recorder_dropped_total{{{SEL}}}[$__rate_interval])", "dropped {{ring}}",
                   "B")]),
        panel("stat", "Frame age", [target(f"time() - stagelens_frame_timestamp_seconds{{{SEL}}}", "age")], "s"),
    ], height=6)


def dashboard() -> dict:
    layout = Layout()
    stage_panels(layout)
    node_panels(layout)
    return {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource",
                      "pluginId": "prometheus", "pluginName": "Prometheus"}],
        "__requires": [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.4.0"},
                       {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"}],
        "uid": "stagelens-node", "title": "stagelens node", "tags": ["stagelens", "gpu", "llm-inference"],
        "description": "The three bottleneck stages of an LLM-inference node side by side (STAGES.md).",
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [{
            "name": "instance", "label": "Node", "type": "query", "datasource": DS,
            "query": {"query": "label_values(stagelens_frame_timestamp_seconds, instance)", "refId": "instance"},
            "definition": "label_values(stagelens_frame_timestamp_seconds, instance)",
            "refresh": 2, "includeAll": False, "multi": False, "current": {}, "options": []}]},
        "annotations": {"list": [{"name": "stagelens alerts", "datasource": DS, "enable": True,
                                  "expr": f'ALERTS{{alertstate="firing",{SEL}}}', "iconColor": "red",
                                  "titleFormat": "{{alertname}}"}]},
        "panels": layout.panels,
    }


if __name__ == "__main__":
    out = pathlib.Path(__file__).with_name("stagelens.json")
    out.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {out}")
