"""Programs some tests drive (promtool, the prometheus server, tmux, kubectl, systemd-analyze): one rule for a
missing one. Skipped where it is missing, with how to install it; under CI, where .ci/run installs it, a failure.
A test asks by `@pytest.mark.tool("NAME")` (tests/conftest.py) or, in a helper, `tool_path("NAME")`."""

from __future__ import annotations

import os
import shutil

import pytest

# how to get each, and whether .ci/run installs it (then missing under CI is a failure, not a skip)
INSTALL = {
    "promtool": ("apt-get install prometheus", True),
    "prometheus": ("apt-get install prometheus", True),
    "tmux": ("apt-get install tmux", True),
    "kubectl": ("its kustomize renders the overlay", False),
    "systemd-analyze": ("apt-get install systemd", False),
}


def tool_path(name: str) -> str:
    """The program's path; the test is skipped (failed under CI, if CI installs it) where it is missing."""
    path = shutil.which(name)
    if path is not None:
        return path
    how, ci_installs = INSTALL[name]
    if ci_installs and os.environ.get("CI"):
        pytest.fail(f"{name} is missing under CI (.ci/run installs it: {how})")
    pytest.skip(f"{name} is not installed ({how})")
