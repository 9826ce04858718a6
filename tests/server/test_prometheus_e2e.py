"""End to end, issue 8's Show: the real Prometheus server with our alert rules scrapes a real
`stagelens serve --engine lab --scenario ...` process; the kv-fragmentation scenario's alerts reach `firing` in
/api/v1/alerts within a deadline, and a healthy run watched for at least as long raises none but the Watchdog.

Two runs of the small lab engine on CPU, one after the other, each with its own Prometheus started once the
agent is ready (so neither the agent's start-up nor the other run's agent going away raises StagelensAgentDown).
The node is a healthy 4-GPU A100 NVLink NVML snapshot: a CI runner has no GPU, and a node without a driver rightly
raises StagelensCollectorFailing. Every wait has a deadline; every process is killed at teardown; the timings
are printed.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

import pytest
import yaml

from tests.helpers.prometheus_support import RULES, Prometheus, free_port, prometheus_binary, stop_process

pytestmark = pytest.mark.slow

ALERTS_FILE = RULES / "stagelens-alerts.yml"
RECORDING_FILE = RULES / "stagelens-recording.yml"
STAGE_ALERTS = ("KVCacheStageFiring", "SchedulerStageFiring", "ColdPathStageFiring")
SCENARIO = "kv-fragmentation"   # the contiguous allocator: KV fragmentation far above 0.3 from the first requests
SCENARIO_ALERTS = ("KVCacheStageFiring", "KVCacheFragmentationHigh")
READY_DEADLINE_S = 120   # torch import and the small model's weights on a 2-core CI runner
FIRING_DEADLINE_S = 60   # from the agent ready to the scenario's alerts firing (issue 8: under 60 s)
HEALTHY_MIN_WATCH_S = 20
SNAPSHOT = pathlib.Path("tests/fixtures/nvml/a100x4_nvlink.json").resolve()


def shortened_rules(workdir: pathlib.Path) -> list[pathlib.Path]:
    """The committed alert rules with every `for:` read in seconds instead of minutes (2m -> 2s, 15m -> 15s).

    Why: the committed durations (2-15 minutes) are sized against production noise; kept, this test would need
    a quarter of an hour per run. Scaled, each alert keeps its patience relative to the others and still goes
    pending -> firing, so the test exercises `for:` too. Expressions, labels and annotations stay the committed
    ones (asserted below), as do the recording rules (loaded from the committed file).
    """
    committed = yaml.safe_load(ALERTS_FILE.read_text())
    shortened = yaml.safe_load(ALERTS_FILE.read_text())
    for group in shortened["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                assert rule["for"].endswith("m") and rule["for"][:-1].isdigit(), rule["for"]
                rule["for"] = rule["for"][:-1] + "s"
    for before, after in zip(committed["groups"], shortened["groups"], strict=True):
        for a, b in zip(before["rules"], after["rules"], strict=True):
            assert {k: v for k, v in a.items() if k != "for"} == {k: v for k, v in b.items() if k != "for"}
    path = workdir / "stagelens-alerts-short-for.yml"
    path.write_text(yaml.safe_dump(shortened, sort_keys=False))
    return [path, RECORDING_FILE]


def stagelens_command() -> list[str]:
    script = pathlib.Path(sys.executable).with_name("stagelens")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from stagelens.cli import main; main()"]


class Agent:
    """`stagelens serve --engine lab --scenario NAME` on a free loopback port, sampling every second."""

    def __init__(self, workdir: pathlib.Path, scenario: str, model_dir: str) -> None:
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}   # no trace export from CI's env
        self.log = open(workdir / f"stagelens-{scenario}.log", "wb")   # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [*stagelens_command(), "--nvml-snapshot", str(SNAPSHOT), "serve", "--listen", self.target,
             "--engine", "lab", "--scenario", scenario, "--model", "small", "--device", "cpu", "--model-dir", model_dir,
             "--interval", "1", "--duration", "600", "--otel-exporter", "none"],   # arrivals outlast the test
            stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def log_tail(self) -> str:
        self.log.flush()
        return pathlib.Path(self.log.name).read_text(errors="replace")[-3000:]

    def wait_ready(self, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.process.poll() is not None:
                pytest.fail(f"stagelens serve exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.target}/readyz", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:   # not listening yet, or 503 before the first sample
                pass
            time.sleep(0.25)
        pytest.fail(f"stagelens serve not ready after {deadline_s}s:\n{self.log_tail()}")

    def stop(self) -> None:
        stop_process(self.process)
        self.log.close()


@dataclass
class Run:
    """What one run saw: seconds from the agent ready to each alert's first pending and firing state."""
    startup_s: float = 0.0
    watched_s: float = 0.0   # from the agent ready
    pending_at: dict[str, float] = field(default_factory=dict)
    firing_at: dict[str, float] = field(default_factory=dict)
    stage_states: dict[str, float] = field(default_factory=dict)
    signal_states: dict[str, float] = field(default_factory=dict)


def observe(prometheus: Prometheus, agent: Agent, run: Run, until, start: float, deadline_s: float) -> None:
    """Poll /api/v1/alerts every half second, noting when (seconds after `start`) each of the agent's alerts and
    the Watchdog first went pending and firing, until `until(run)` holds or `deadline_s` after `start`."""
    while (elapsed := time.monotonic() - start) < deadline_s:
        if agent.process.poll() is not None:
            pytest.fail(f"stagelens serve exited with {agent.process.returncode}:\n{agent.log_tail()}")
        if prometheus.process.poll() is not None:
            pytest.fail(f"prometheus exited with {prometheus.process.returncode}: {prometheus.log.name}")
        for alert in prometheus.get("/api/v1/alerts")["alerts"]:
            if alert["labels"].get("instance", agent.target) != agent.target:
                continue
            name = alert["labels"]["alertname"]
            run.pending_at.setdefault(name, round(elapsed, 1))
            if alert["state"] == "firing":
                run.firing_at.setdefault(name, round(elapsed, 1))
        if until(run):
            break
        time.sleep(0.5)
    run.watched_s = round(time.monotonic() - start, 1)
    states = prometheus.get("/api/v1/query", query=f'stagelens_stage_state{{instance="{agent.target}"}}')
    run.stage_states = {s["metric"]["stage"]: float(s["value"][1]) for s in states["result"]}
    states = prometheus.get("/api/v1/query", query=f'stagelens_signal_state{{instance="{agent.target}"}}')
    run.signal_states = {s["metric"]["signal"]: float(s["value"][1]) for s in states["result"]}


def lab_run(tmp_path_factory, model_dir: str, scenario: str, until, deadline_s: float) -> Run:
    binary = prometheus_binary()
    workdir = tmp_path_factory.mktemp(f"e2e-{scenario}")
    started = time.monotonic()
    agent = Agent(workdir, scenario, model_dir)
    prometheus = None
    try:
        run = Run()
        agent.wait_ready(READY_DEADLINE_S)
        ready = time.monotonic()
        run.startup_s = round(ready - started, 1)
        prometheus = Prometheus(binary, workdir, [agent.target], rule_files=shortened_rules(workdir))
        prometheus.wait_for("prometheus scraping the agent", lambda: [
            t["health"] for t in prometheus.get("/api/v1/targets")["activeTargets"]] == ["up"])
        # Until its first scrape (service discovery hands targets over at most every 5 s) a fresh Prometheus has no
        # up{job="stagelens"}, so StagelensAgentDown's absent() holds from its first evaluation; with `for: 5m` that
        # start-up never fires, with the test's 5s it can. The first scrape ends it: wait for that, then observe.
        prometheus.wait_for("StagelensAgentDown to clear after the first scrape", lambda: not any(
            a["labels"]["alertname"] == "StagelensAgentDown" for a in prometheus.get("/api/v1/alerts")["alerts"]))
        observe(prometheus, agent, run, until, ready, deadline_s)
        return run
    finally:
        if prometheus is not None:
            prometheus.stop()
        agent.stop()


@pytest.fixture(scope="module")
def degraded(tmp_path_factory, model_dir) -> Run:
    return lab_run(tmp_path_factory, model_dir, SCENARIO,
                   lambda run: all(name in run.firing_at for name in SCENARIO_ALERTS), FIRING_DEADLINE_S)


@pytest.fixture(scope="module")
def healthy(degraded, tmp_path_factory, model_dir) -> Run:
    """Watched at least as long as the degraded run needed for its alerts to fire."""
    needed = max(degraded.firing_at.get(name, FIRING_DEADLINE_S) for name in SCENARIO_ALERTS)
    watch_s = max(HEALTHY_MIN_WATCH_S, needed)
    return lab_run(tmp_path_factory, model_dir, "healthy", lambda run: False, watch_s)


def report(capsys, label: str, run: Run) -> None:
    with capsys.disabled():
        print(f"\n[e2e {label}] agent ready after {run.startup_s}s; watched {run.watched_s}s; "
              f"pending at {run.pending_at}; firing at {run.firing_at}; stage states {run.stage_states}")


def test_the_scenarios_alerts_fire_within_the_deadline(degraded, capsys):
    report(capsys, SCENARIO, degraded)
    missing = [name for name in SCENARIO_ALERTS if name not in degraded.firing_at]
    assert not missing, f"not firing within {FIRING_DEADLINE_S}s of the agent ready: {missing}; saw {degraded}"
    # the agent itself judged the stage firing, and its verdict names the KV cache, not another stage
    assert degraded.stage_states["kv_cache"] == 2 and degraded.stage_states["cold_path"] == 0
    assert "Watchdog" in degraded.firing_at   # the rules were loaded and evaluated


def test_a_healthy_run_fires_nothing_but_the_watchdog(healthy, capsys):
    report(capsys, "healthy", healthy)
    assert "Watchdog" in healthy.firing_at   # the rules were loaded and evaluated all along
    assert set(healthy.firing_at) - {"Watchdog"} == set()
    assert not set(STAGE_ALERTS) & set(healthy.pending_at)   # not even pending
    # the stages were judged (not unknown) from real engine traffic: the silence is not for want of data
    assert healthy.stage_states == {"kv_cache": 0, "scheduler": 0, "cold_path": 0}
    # alerts and agent agree on the signals a CPU shows but does not judge (-1) or judges on decided waits only
    assert healthy.signal_states["effective_bandwidth_ratio"] in (-1, 0)
    assert healthy.signal_states["scheduler_wait_p99"] == 0
