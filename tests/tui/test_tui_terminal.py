"""`stagelens tui --replay` in a real terminal (tmux): the verdict is on screen and `q` exits with 0.

Skipped only where tmux is absent and CI is unset; under CI it must run (.ci/run installs tmux).
The deadlines below only stop a hung test; no assertion is made on time.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TMUX = shutil.which("tmux")
BUNDLE = Path(__file__).parents[1] / "fixtures" / "bundles" / "hol-blocking.jsonl"

pytestmark = pytest.mark.tool("tmux")


def _stagelens() -> str:
    script = Path(sys.executable).parent / "stagelens"
    return str(script) if script.exists() else f"{sys.executable} -c 'from stagelens.cli import main; main()'"


def _wait_for(check, deadline_s: float = 30.0):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        result = check()
        if result:
            return result
        time.sleep(0.1)
    return check()


def _start(tmp_path, args: str):
    """The TUI in a detached tmux session; returns (tmux argv, status file, screen reader)."""
    server = f"stagelens-test-{os.getpid()}-{tmp_path.name}"
    status = tmp_path / "status"
    tmux = [TMUX, "-L", server, "-f", "/dev/null"]
    command = f"{_stagelens()} tui {args} --screenshot-dir {tmp_path}; echo $? > {status}"
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("TMUX", None)
    subprocess.run([*tmux, "new-session", "-d", "-s", "tui", "-x", "120", "-y", "40", command], check=True, env=env,
                   cwd=tmp_path)

    def screen() -> str:
        out = subprocess.run([*tmux, "capture-pane", "-p", "-t", "tui"], capture_output=True, text=True)
        return out.stdout if out.returncode == 0 else ""
    return tmux, status, screen


def _pane_pid(tmux) -> int:
    out = subprocess.run([*tmux, "list-panes", "-t", "tui", "-F", "#{pane_pid}"], capture_output=True, text=True)
    shell = int(out.stdout.split()[0])
    children = subprocess.run(["pgrep", "-P", str(shell)], capture_output=True, text=True).stdout.split()
    return int(children[0])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_quits_the_tui_as_q_does(tmp_path, sig):
    tmux, status, screen = _start(tmp_path, f"--replay {BUNDLE}")
    try:
        assert _wait_for(lambda: "root stage: scheduler" in screen()), screen()
        os.kill(_pane_pid(tmux), sig)
        assert _wait_for(lambda: status.exists() and status.read_text().strip()), "the TUI did not exit"
        assert status.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def test_replay_under_tmux_shows_the_verdict_and_q_exits_cleanly(tmp_path):
    tmux, status, screen = _start(tmp_path, f"--replay {BUNDLE}")
    try:
        shown = _wait_for(lambda: (lambda s: s if "root stage: scheduler" in s else "")(screen()))
        assert "FIRING" in shown and "root stage: scheduler" in shown, screen()
        assert "REPLAY 20/20" in shown and "gpu-node-07" in shown
        subprocess.run([*tmux, "send-keys", "-t", "tui", "q"], check=True)
        assert _wait_for(lambda: status.exists() and status.read_text().strip()), "the TUI did not exit on q"
        assert status.read_text().strip() == "0"
        gone = _wait_for(lambda: subprocess.run([*tmux, "has-session", "-t", "tui"],
                                                capture_output=True).returncode != 0, 10)
        assert gone, "the tmux session is still there after q"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
