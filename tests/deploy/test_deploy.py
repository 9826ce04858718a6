"""deploy/: the Kubernetes DaemonSet, Service, ServiceMonitor and PrometheusRule fit together and fit the agent
(its CLI accepts the command, the probes hit its health routes on the served port, the scrape job is the one the
alerts expect, the rules are the committed ones), and the systemd unit is hardened and passes systemd-analyze."""

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from stagelens.commands.serve import serve
from tests.helpers.deploy_manifests import ALERTS_FILE, CONTAINER, K8S, KUBE, POD, RECORDING_FILE, serve_args
from tests.helpers.tools import tool_path

UNIT = pathlib.Path("deploy/systemd/stagelens.service")
RSS_BUDGET_MIB = 80


def mebibytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|K|M|G)?", quantity).groups()
    scale = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "K": 1e3 / 2**20, "M": 1e6 / 2**20, "G": 1e9 / 2**20,
             None: 1 / 2**20}
    return float(number) * scale[unit]


def container_port(name_or_number) -> int:
    ports = {p["name"]: p["containerPort"] for p in CONTAINER["ports"]}
    return ports[name_or_number] if isinstance(name_or_number, str) else name_or_number


def test_the_kustomization_lists_every_manifest():
    listed = set(yaml.safe_load((KUBE / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in KUBE.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(K8S) == {"Namespace", "DaemonSet", "Service", "ServiceMonitor", "PrometheusRule"}


def test_the_container_runs_stagelens_serve_with_options_the_cli_accepts():
    args = serve_args(CONTAINER["command"] + CONTAINER.get("args", []))
    ctx = serve.make_context("serve", list(args))   # raises on an unknown option or a bad value
    host, _, port = ctx.params["listen"].rpartition(":")
    # a deliberate non-loopback bind inside the pod's own network namespace, so the Service reaches it
    assert host == "0.0.0.0" and not POD.get("hostNetwork")
    assert int(port) == container_port("metrics")
    assert ctx.params["engine_kind"] == "none"   # the fleet agent hosts no lab engine


def test_the_probes_hit_the_health_routes_on_the_served_port():
    port = int(serve.make_context("serve", serve_args(CONTAINER["command"])).params["listen"].rpartition(":")[2])
    assert CONTAINER["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert CONTAINER["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container_port(CONTAINER[probe]["httpGet"]["port"]) == port, probe


def test_the_routes_the_probes_hit_exist():
    from fastapi.testclient import TestClient

    from stagelens.server.app import create_app

    class Runtime:   # just enough of AgentRuntime for the health routes
        def ready(self):
            return False, "no sample taken yet"

    client = TestClient(create_app(Runtime(), None))
    assert client.get(CONTAINER["livenessProbe"]["httpGet"]["path"]).status_code == 200
    assert client.get(CONTAINER["readinessProbe"]["httpGet"]["path"]).status_code == 503   # not ready: no sample


def test_the_pod_is_unprivileged_with_a_read_only_root():
    pod_sc, sc = POD["securityContext"], CONTAINER["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] != 0
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and not sc.get("privileged")
    assert not POD.get("hostPID") and not POD.get("hostNetwork") and not POD.get("hostIPC")
    # what the agent writes (its cache, HOME) lies on a writable volume, not the read-only root
    env = {e["name"]: e["value"] for e in CONTAINER["env"]}
    mounts = [m["mountPath"] for m in CONTAINER["volumeMounts"]]
    for var in ("HOME", "XDG_CACHE_HOME"):
        assert any(env[var] == m or env[var].startswith(m.rstrip("/") + "/") for m in mounts), var


def test_the_gpus_are_seen_through_the_nvidia_runtime_without_taking_one():
    env = {e["name"]: e["value"] for e in CONTAINER["env"]}
    assert POD["runtimeClassName"] == "nvidia"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    resources = CONTAINER["resources"]
    assert not any(k.startswith("nvidia.com/") for part in resources.values() for k in part)


def test_resources_fit_the_agents_budget():
    resources = CONTAINER["resources"]
    request, limit = mebibytes(resources["requests"]["memory"]), mebibytes(resources["limits"]["memory"])
    assert RSS_BUDGET_MIB <= request <= limit <= 3 * RSS_BUDGET_MIB
    assert "cpu" in resources["requests"] and "cpu" in resources["limits"]


def test_the_service_and_servicemonitor_reach_the_pods_metrics_port():
    service, monitor = K8S["Service"], K8S["ServiceMonitor"]
    pod_labels = K8S["DaemonSet"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"   # headless: every node's pod scraped on its own
    assert service["spec"]["selector"].items() <= pod_labels.items()
    [port] = [p for p in service["spec"]["ports"] if p["name"] == "metrics"]
    assert container_port(port["targetPort"]) == container_port("metrics")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"] and endpoint.get("path", "/metrics") == "/metrics"


def test_the_scrape_job_is_the_one_the_agent_down_alert_expects():
    service, monitor = K8S["Service"], K8S["ServiceMonitor"]
    # the Prometheus Operator names the job after the Service's jobLabel label, else after the Service
    job_label = monitor["spec"].get("jobLabel")
    job = service["metadata"]["labels"][job_label] if job_label else service["metadata"]["name"]
    assert job == "stagelens"
    agent_down = next(r for g in yaml.safe_load(ALERTS_FILE.read_text())["groups"] for r in g["rules"]
                      if r.get("alert") == "StagelensAgentDown")
    assert set(re.findall(r'up\{job="([^"]+)"\}', agent_down["expr"])) == {job}


def test_the_node_name_becomes_the_hostname_label():
    [endpoint] = K8S["ServiceMonitor"]["spec"]["endpoints"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "hostname", "action": "replace"} in \
        endpoint["relabelings"]
    assert not endpoint.get("honorLabels")   # else the pod's own name, exported as hostname, would win


def test_the_prometheusrule_holds_the_committed_rules():
    groups = [*yaml.safe_load(ALERTS_FILE.read_text())["groups"], *yaml.safe_load(RECORDING_FILE.read_text())["groups"]]
    assert K8S["PrometheusRule"]["spec"]["groups"] == groups
    spec = importlib.util.spec_from_file_location("deploy_generate", KUBE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.render() == (KUBE / "prometheusrule.yaml").read_text(), "run python deploy/kubernetes/generate.py"


def unit_settings(text: str) -> dict[str, dict[str, list[str]]]:
    """{section: {key: [values, in order]}} of a systemd unit (keys may repeat)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = out.setdefault(line.strip("[]"), {})
        else:
            key, _, value = line.partition("=")
            section.setdefault(key.strip(), []).append(value.strip())
    return out


UNIT_SETTINGS = unit_settings(UNIT.read_text())


def test_the_unit_runs_stagelens_serve_with_options_the_cli_accepts():
    service = UNIT_SETTINGS["Service"]
    [exec_start] = service["ExecStart"]
    command = exec_start.split()
    assert command[0] == "/opt/stagelens/.venv/bin/stagelens"
    ctx = serve.make_context("serve", serve_args(command))
    assert ctx.params["listen"].startswith("127.0.0.1:")   # loopback unless a drop-in says otherwise
    assert service["Restart"] == ["on-failure"]
    assert UNIT_SETTINGS["Install"]["WantedBy"] == ["multi-user.target"]


def test_the_unit_is_hardened():
    service = {k: v[-1] for k, v in UNIT_SETTINGS["Service"].items()}
    assert service.get("DynamicUser") == "yes" or service.get("User") not in (None, "", "root", "0")
    assert service["ProtectSystem"] == "strict"
    assert service["NoNewPrivileges"] == "yes"
    assert service["CapabilityBoundingSet"] == "" and service["ProtectHome"] in ("yes", "read-only")
    assert service.get("PrivateDevices", "no") == "no"   # NVML needs /dev/nvidia*
    assert RSS_BUDGET_MIB <= mebibytes(service["MemoryMax"].replace("M", "Mi")) <= 3 * RSS_BUDGET_MIB


def systemd_analyze() -> str:
    return tool_path("systemd-analyze")


def runnable_copy(tmp_path) -> pathlib.Path:
    """The unit with ExecStart pointing at this checkout's stagelens: `verify` checks that the binary exists,
    and /opt/stagelens is where an install puts it, not where the tests run."""
    here = pathlib.Path(sys.executable).with_name("stagelens")
    if not here.exists():
        pytest.skip("no stagelens console script beside the test interpreter")
    path = tmp_path / "stagelens.service"
    path.write_text(UNIT.read_text().replace("/opt/stagelens/.venv/bin/stagelens", str(here)))
    return path


def test_systemd_analyze_verify_passes(tmp_path):
    result = subprocess.run([systemd_analyze(), "verify", str(runnable_copy(tmp_path))], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and "stagelens.service" not in result.stderr, result.stderr


def test_systemd_analyze_security_rates_it_ok(tmp_path):
    result = subprocess.run([systemd_analyze(), "security", "--offline=true", "--no-pager",
                             str(runnable_copy(tmp_path))], capture_output=True, text=True, timeout=60)
    if "--offline" in result.stderr and result.returncode != 0:
        pytest.skip("this systemd-analyze has no --offline (systemd < 250)")
    exposure = re.search(r"Overall exposure level for stagelens\.service: ([\d.]+)", result.stdout)
    assert exposure, result.stdout + result.stderr
    assert float(exposure.group(1)) <= 3.0   # systemd rates up to 3.9 "OK"; the unit scores 2.1
