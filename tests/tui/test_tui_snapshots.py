"""Snapshots of the TUI at 80×24 and 160×48: healthy and each stage firing, from bundles recorded once
from the lab (tests/fixtures/make_bundles.py). Deterministic: the replay shows the bundle's last frame,
and every time on screen is a frame's own. Update with `pytest tests/tui/test_tui_snapshots.py --snapshot-update`
after looking at the new SVGs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stagelens.bundle import read_bundle
from stagelens.tui.app import StagelensApp
from stagelens.tui.replay_feed import ReplayFeed

# relative to the repository root (make test runs there), so the path in the top bar is the same in any clone
BUNDLES = Path(os.path.relpath(Path(__file__).parents[1] / "fixtures" / "bundles"))
SIZES = [(80, 24), (160, 48)]


def replay_app(name: str) -> StagelensApp:
    return StagelensApp(ReplayFeed(read_bundle(str(BUNDLES / f"{name}.jsonl"))), autopoll=False)


async def _first_poll(pilot) -> None:
    pilot.app.poll_once()
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", ["healthy", "kv-fragmentation", "hol-blocking", "cold-load"])
def test_dashboard(snap_compare, name, size):
    assert snap_compare(replay_app(name), terminal_size=size, run_before=_first_poll)


def test_help_screen(snap_compare):
    assert snap_compare(replay_app("hol-blocking"), terminal_size=(80, 24), run_before=_first_poll,
                        press=["question_mark"])


def test_panels_hidden(snap_compare):
    """GPU, KV and cold path panels hidden: the scheduler and the event log take the screen."""
    assert snap_compare(replay_app("hol-blocking"), terminal_size=(160, 48), run_before=_first_poll,
                        press=["1", "2", "4"])
