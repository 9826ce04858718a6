"""Waiting for a `stagelens serve` the bench started: shared by the benches that drive one over HTTP."""

from __future__ import annotations

import contextlib
import subprocess
import time
import urllib.request


def wait_for_route(base: str, route: str, agent: subprocess.Popen, deadline_s: float) -> None:
    """Until the agent answers `route` (e.g. /readyz, or /healthz when its engine is hostile) with 200; exits
    the bench with one line if the agent dies or the deadline passes."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if agent.poll() is not None:
            raise SystemExit(f"stagelens serve exited with {agent.returncode}")
        with contextlib.suppress(OSError), urllib.request.urlopen(base + route, timeout=2) as answer:
            if answer.status == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"stagelens serve did not answer {route} within {deadline_s:g} s")
