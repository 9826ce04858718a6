"""The alert and recording rules: promtool accepts them and their unit tests pass; every alert is complete,
tested firing, uses thresholds equal to the agent's defaults, and names only metrics the exporter exports.

There is no YAML library in the environment, so `read_alerts` reads our own rule files' layout
(`- alert:` blocks, one key per line); promtool and the real Prometheus (test_prometheus_server.py)
check the YAML itself.
"""

import re
import subprocess

import pytest

from stagelens.diagnosis.signals import SIGNALS_BY_ID
from stagelens.runbook_files import runbook_ref
from tests.helpers.alert_rules import ALERTS_FILE, RECORDING_FILE, RULES, read_alerts, recorded_names, rule_metric_names
from tests.helpers.exposition import exported_metric_names, promtool

UNIT_TESTS = sorted((RULES / "tests").glob("*.yml"))
SEVERITIES = {"critical", "warning", "info"}

# alert -> the signal whose firing threshold its expression must use
SIGNAL_OF_ALERT = {
    "KVCacheFragmentationHigh": "kv_fragmentation_ratio",
    "KVCacheAccessEfficiencyLow": "kv_access_efficiency",
    "KVCacheBandwidthEfficiencyLow": "effective_bandwidth_ratio",
    "SchedulerWaitP99High": "scheduler_wait_p99",
    "HeadOfLineBlocking": "head_of_line_blocking",
    "ComputeUnderusedWithQueue": "compute_utilisation",
    "PCIeBackpressure": "pcie_backpressure",
    "ModelLoadContention": "step_time_inflation",
    "ThreadsBlockedOnData": "threads_blocked_on_data",
}


def test_promtool_check_rules_passes():
    result = subprocess.run([promtool(), "check", "rules", str(ALERTS_FILE), str(RECORDING_FILE)],
                            capture_output=True, timeout=60)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()


@pytest.mark.parametrize("path", UNIT_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(path):
    result = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, timeout=120)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()


def test_every_alert_is_complete():
    alerts = read_alerts()
    assert len(alerts) >= 20
    for name, rule in alerts.items():
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", name), name
        assert rule["labels"].get("severity") in SEVERITIES, name
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), name
        assert rule["annotations"]["runbook_url"] == runbook_ref(name)   # the name agent.runbook_files gives
        assert "{{ $value" in rule["annotations"]["description"] + rule["annotations"]["summary"] \
            or name in ("Watchdog", "StagelensAgentDown", "GPULost", "NVLinkDown", "PCIeLinkBelowMax",
                        "GPUClocksThrottled", "StagelensCollectorFailing"), name
        assert "{{ $labels." in rule["annotations"]["description"] or name == "Watchdog", name
    assert {"KVCacheStageFiring", "SchedulerStageFiring", "ColdPathStageFiring", "Watchdog"} <= set(alerts)


def test_every_alert_fires_in_a_promtool_test():
    text = "\n".join(p.read_text() for p in UNIT_TESTS)
    fired = set(re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels", text))
    assert set(read_alerts()) - fired == set()


def test_signal_alert_thresholds_equal_the_agents_defaults():
    alerts = read_alerts()
    for name, signal_id in SIGNAL_OF_ALERT.items():
        expr = alerts[name]["expr"]
        numbers = [float(n) for n in re.findall(r"[<>]=?\s*([0-9.]+)\s*$", expr)]
        assert numbers == [SIGNALS_BY_ID[signal_id].firing], (name, expr)


def test_stage_alerts_are_the_vocabularys():
    from stagelens.vocabulary import STAGE_ALERTS, STAGES

    alerts = read_alerts()
    assert set(STAGE_ALERTS) == set(STAGES)
    for stage, name in STAGE_ALERTS.items():
        assert alerts[name]["labels"]["stage"] == stage
        assert f'stage="{stage}"' in alerts[name]["expr"]
    staged = {name for name, rule in alerts.items() if name.endswith("StageFiring")}
    assert staged == set(STAGE_ALERTS.values())


def test_rules_name_only_exported_or_recorded_metrics(model_dir):
    exported = exported_metric_names(model_dir)
    text = ALERTS_FILE.read_text() + RECORDING_FILE.read_text()
    assert rule_metric_names(text) - exported == set()
    used_records = set(re.findall(r"\b((?:instance|cluster):[a-z0-9_]+:[a-z0-9_]+)", ALERTS_FILE.read_text()))
    assert used_records <= recorded_names()
    for record in recorded_names():
        assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", record), record   # level:metric:operations
