"""The CLI run as a user runs it, and its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from stagelens.errors import EXIT_UNKNOWN

STAGELENS = str(Path(sys.executable).parent / "stagelens")


ROOT = Path(__file__).resolve().parents[2]


def stagelens(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([STAGELENS, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})})


def assert_one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 3, nothing but one `stagelens: error:` line on stderr, holding `words`; returns the line."""
    assert proc.returncode == EXIT_UNKNOWN, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stagelens: error:"), proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]
