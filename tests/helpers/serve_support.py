"""`stagelens serve` as a real process on a free loopback port, for tests that need the whole server:
signals, sockets, uvicorn, the engine thread. Every wait has a deadline; `stop()` always reaps."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.helpers.prometheus_support import free_port

DGX = pathlib.Path(__file__).parents[1] / "fixtures" / "nvml" / "dgx_a100.json"
TINY_LAB = ("--engine", "lab", "--model", "tiny", "--device", "cpu", "--max-model-len", "256",
            "--kv-cache-memory", "2MiB")


def stagelens_command() -> list[str]:
    script = pathlib.Path(sys.executable).with_name("stagelens")
    return [str(script)] if script.exists() else [sys.executable, "-c", "from stagelens.cli import main; main()"]


class ServeProcess:
    def __init__(self, workdir: pathlib.Path, *args: str, name: str = "serve", env: dict | None = None) -> None:
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.target}"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}   # no trace export from CI's env
        self.log = open(workdir / f"stagelens-{name}.log", "wb")   # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [*stagelens_command(), "--nvml-snapshot", str(DGX), "serve", "--listen", self.target, *args],
            stdout=self.log, stderr=subprocess.STDOUT, env={**clean, **(env or {})})

    def log_tail(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return pathlib.Path(self.log.name).read_text(errors="replace")[-3000:]

    def wait_ready(self, deadline_s: float = 60) -> ServeProcess:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.process.poll() is not None:
                pytest.fail(f"stagelens serve exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:   # not listening yet, or 503 before the first sample
                pass
            time.sleep(0.1)
        pytest.fail(f"stagelens serve not ready after {deadline_s}s:\n{self.log_tail()}")

    def request(self, method: str, path: str, body=None, headers: dict | None = None,
                timeout: float = 30) -> tuple[int, dict | str]:
        data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"content-type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            return status, json.loads(raw)
        except json.JSONDecodeError:
            return status, raw.decode(errors="replace")

    def metric(self, name: str, **labels) -> float | None:
        """One sample of the exposition, or None."""
        from tests.helpers.exposition import parse

        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            samples = parse(response.read())
        return samples.get((name, frozenset(labels.items())))

    def signal(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        if not self.log.closed:
            self.log.close()
