"""Waiting in tests on something another thread or process does: poll it under a deadline, never a fixed sleep."""

from __future__ import annotations

import time

import pytest


def wait_for(condition, timeout: float = 30.0, what: str = "condition", every: float = 0.1):
    """The first truthy value `condition()` returns; the test fails when none comes within `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(every)
    pytest.fail(f"timed out waiting for {what}")
