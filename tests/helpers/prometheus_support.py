"""The real Prometheus server for end-to-end tests (test_prometheus_server.py, test_prometheus_e2e.py).

Debian's prometheus binary runs on a free loopback port with its own data directory and our rule files;
every wait has a deadline and `stop()` kills the server. Skipped only where the binary is missing outside CI.
"""

from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from tests.helpers.tools import tool_path

RULES = pathlib.Path("dashboards/prometheus").resolve()
RULE_FILES = (RULES / "stagelens-alerts.yml", RULES / "stagelens-recording.yml")
DEADLINE_S = 45


def prometheus_binary() -> str:
    return tool_path("prometheus")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(process: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; always reaped."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait(timeout=grace_s)


class Prometheus:
    def __init__(self, binary: str, workdir: pathlib.Path, targets: list[str],
                 rule_files=RULE_FILES, job: str = "stagelens") -> None:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}],
        }
        (workdir / "prometheus.yml").write_text(json.dumps(config))   # JSON is YAML
        self.log = open(workdir / "prometheus.log", "wb")   # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--enable-feature=exemplar-storage",
             "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path: str, **params):
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())["data"]

    def wait_for(self, what: str, check, deadline_s: float = DEADLINE_S, interval_s: float = 0.25):
        """Poll `check()` until it returns something truthy; fail with `what` at the deadline."""
        end = time.monotonic() + deadline_s
        last_error = None
        while time.monotonic() < end:
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited with {self.process.returncode}: {self.log.name}")
            try:
                result = check()
                if result:
                    return result
            except (OSError, ValueError, KeyError) as exc:   # not up yet
                last_error = exc
            time.sleep(interval_s)
        pytest.fail(f"timed out after {deadline_s}s waiting for {what} (last error: {last_error})")

    def stop(self) -> None:
        stop_process(self.process)
        self.log.close()


def alerts_by_instance(server: Prometheus) -> dict[str, dict[str, str]]:
    """{instance ("" for alerts without one, like Watchdog): {alertname: state}} from /api/v1/alerts."""
    out: dict[str, dict[str, str]] = {}
    for alert in server.get("/api/v1/alerts")["alerts"]:
        out.setdefault(alert["labels"].get("instance", ""), {})[alert["labels"]["alertname"]] = alert["state"]
    return out
