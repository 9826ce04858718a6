"""The TUI driven by Textual's pilot: frames injected through the worker's message path (`Polled`),
the poller off, and no clock but the frames' own time."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from stagelens.bundle import read_bundle
from stagelens.probes.sample import DriverStatus
from stagelens.probes.topology import Topology
from stagelens.tui.app import StagelensApp
from stagelens.tui.feed import Poll
from stagelens.tui.remote_feed import RemoteFeed
from stagelens.tui.replay_feed import ReplayFeed
from stagelens.tui.screens.help import HelpScreen
from stagelens.tui.screens.runbook import RunbookScreen
from stagelens.tui.screens.topology import TopologyScreen
from tests.helpers.frame_builders import engine_snapshot, frame
from tests.helpers.tui_pilot import HOL, FakeFeed, frames, inject, make_app, notes
from tests.helpers.tui_support import text_of

pytestmark = pytest.mark.asyncio

BUNDLES = Path(__file__).parents[1] / "fixtures" / "bundles"


async def test_injected_frames_show_the_firing_stage_its_evidence_and_the_transition():
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        assert "waiting for the first frame" in text_of(app)
        await inject(app, pilot, Poll(frames(5, **HOL)))
        screen = text_of(app)
        assert "FIRING" in screen and "root stage: scheduler" in screen
        assert "scheduler wait p99 900 ms > 20 ms" in screen           # the evidence, with its numbers
        assert "test-node" in screen and "● LIVE" in screen
        assert "UNKNOWN → WARN" in screen and "WARN → FIRING" in screen  # the event log: warn at the first sample
        assert "f  apply fix: " in screen and "--enable-chunked-prefill" in screen
        assert app.state.diagnosis.root_stage == "scheduler"


async def test_panels_toggle_with_1_to_5():
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await inject(app, pilot, Poll(frames(3)))
        for key in "12345":
            panel = app.panel(key)
            assert panel.display
            await pilot.press(key)
            assert not panel.display
            await pilot.press(key)
            assert panel.display


async def test_help_screen_opens_with_question_mark_and_any_key_closes_it():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "ctrl+s" in text_of(app)
        await pilot.press("x")
        assert not isinstance(app.screen, HelpScreen)


async def test_enter_opens_the_root_stages_runbook_rendered(tmp_path):
    (tmp_path / "SchedulerStageFiring.md").write_text("# SchedulerStageFiring\n\n## Mitigation\n\nTurn on "
                                                      "**chunked prefill**.\n")
    app = make_app(runbook_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await inject(app, pilot, Poll(frames(5, **HOL)))
        await pilot.press("enter")
        assert isinstance(app.screen, RunbookScreen)
        screen = text_of(app)
        assert "Mitigation" in screen and "chunked prefill" in screen and "**" not in screen
        await pilot.press("escape")
        assert not isinstance(app.screen, RunbookScreen)


async def test_a_missing_runbook_says_so(tmp_path):
    app = make_app(runbook_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await inject(app, pilot, Poll(frames(5, **HOL)))
        await pilot.press("enter")
        assert isinstance(app.screen, RunbookScreen)
        assert "runbook not found" in text_of(app)


async def test_enter_with_nothing_firing_only_notifies():
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await inject(app, pilot, Poll(frames(5)))
        await pilot.press("enter")
        assert not isinstance(app.screen, RunbookScreen)
        assert "no runbook to open" in notes(app)


async def test_pause_interval_and_refresh():
    source = FakeFeed()
    app = make_app(source)
    async with app.run_test(size=(100, 30)) as pilot:
        await inject(app, pilot, Poll(frames(2)))
        await pilot.press("space")
        assert source.paused and "PAUSED" in text_of(app)
        await pilot.press("p")
        assert not source.paused and "● LIVE" in text_of(app)
        await pilot.press("plus")
        assert app.poller.interval == 2.0 and "every 2s" in text_of(app)
        await pilot.press("minus", "minus")
        assert app.poller.interval == 0.5
        polls = source.polls
        await pilot.press("r")
        assert source.polls == polls + 1


async def test_ctrl_s_saves_an_svg_named_after_the_frame(tmp_path):
    app = make_app(screenshot_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await inject(app, pilot, Poll(frames(2, **HOL)))
        await pilot.press("ctrl+s")
        await pilot.pause()
        saved = list(tmp_path.glob("*.svg"))
        assert [p.name for p in saved] == ["stagelens-test-node-20270115T080001Z.svg"]
        assert "<svg" in saved[0].read_text()
        assert "screenshot saved" in notes(app)


async def test_f_applies_the_fix_and_the_tui_shows_the_stage_clearing_with_before_and_after():
    source = FakeFeed()
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await inject(app, pilot, Poll(frames(5, **HOL)))
        await pilot.press("f")
        assert source.fixes and source.fixes[0]["enable_chunked_prefill"] is True
        assert source.polls == 1                     # the fix is picked up at once
        healthy = frames(5, start=5, scheduler={"decided_wait_p99_s": 0.002, "waiting": 0, "running": 4},
                         enable_chunked_prefill=True)
        await inject(app, pilot, Poll(healthy))
        screen = text_of(app)
        assert "the fix" in screen and "before" in screen and "-100%" in screen
        assert "FIRING → OK" in screen or "FIRING → WARN" in screen
        assert "fix applied at" in screen and "(was firing (scheduler))" in screen
        assert app.state.diagnosis.stage("scheduler").state == "ok"


async def test_f_outside_local_mode_says_what_it_would_apply():
    app = make_app(FakeFeed(kind="replay", can_fix=False))
    async with app.run_test(size=(120, 30)) as pilot:
        await inject(app, pilot, Poll(frames(5, **HOL)))
        await pilot.press("f")
        assert app.state.fix is None
        assert "local lab engine only" in notes(app)


async def test_t_opens_the_topology_screen():
    gpus = [{"index": 0, "name": "A100", "utilization_gpu_ratio": 0.5, "pcie": None, "nvlinks": []}]
    f = frame(0, engine_snapshot(), gpus=gpus)
    f.node_sample.topology = Topology(gpus=["GPU0"], matrix=[["X"]], cpu_affinity=["0-7"], numa_affinity=[0],
                                      links=[])
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await inject(app, pilot, Poll([f]))
        await pilot.press("t")
        assert isinstance(app.screen, TopologyScreen)
        assert "CPU Affinity" in text_of(app)
        await pilot.press("escape")
        assert not isinstance(app.screen, TopologyScreen)


async def test_a_node_without_gpu_says_so():
    f = frame(0, engine_snapshot(), gpus=[])
    f.node_sample.driver = DriverStatus(state="no_driver", source="test", message="NVML library not found")
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await inject(app, pilot, Poll([f]))
        assert "no GPU on this node (NVML library not found)" in text_of(app)


async def test_replay_seek_and_play():
    source = ReplayFeed(read_bundle(str(BUNDLES / "hol-blocking.jsonl")))
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_once()
        await pilot.pause()
        assert "REPLAY 20/20" in text_of(app) and "root stage: scheduler" in text_of(app)
        await pilot.press("left_square_bracket")
        assert "REPLAY 10/20" in text_of(app)
        assert len(app.state.frames) == 10
        await pilot.press("home")
        assert "REPLAY 1/20" in text_of(app)
        assert app.state.diagnosis.verdict != "firing"      # one frame: hysteresis has not risen yet
        await pilot.press("right")
        assert "REPLAY 11/20" in text_of(app)
        await pilot.press("end")
        assert "REPLAY 20/20" in text_of(app) and "FIRING" in text_of(app)
        await pilot.press("space")                           # play from the end: starts again
        assert not source.paused and source.position == 1
        app.poll_once()
        await pilot.pause()
        assert "▶ REPLAY 2/20" in text_of(app)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_remote_source_that_does_not_answer_is_stale_and_the_app_stays_responsive():
    source = RemoteFeed(f"http://127.0.0.1:{_closed_port()}", timeout=0.5)
    app = StagelensApp(source, interval=0.25)          # the real worker
    async with app.run_test(size=(120, 30)) as pilot:
        for _ in range(200):
            if app.info["error"]:
                break
            await pilot.pause(0.05)
        screen = text_of(app)
        assert "STALE" in screen and "could not collect" in screen
        await pilot.press("2")
        assert not app.panel("2").display
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")


async def test_the_command_palette_holds_our_commands():
    local, replay = make_app(FakeFeed()), make_app(FakeFeed(kind="replay", can_fix=False))
    async with local.run_test(size=(80, 24)):
        titles = [c.title for c in local.get_system_commands(local.screen)]
        assert "Panel 1: GPU & topology" in titles and "Apply the recommended fix" in titles
        assert "Theme" in titles                                       # Textual's own stay
    async with replay.run_test(size=(80, 24)):
        titles = [c.title for c in replay.get_system_commands(replay.screen)]
        assert "Apply the recommended fix" not in titles and "Replay: first frame" in titles


@pytest.mark.parametrize("size", [(80, 24), (100, 30)])
async def test_small_terminals_scroll_the_root_stages_panel_into_view(size):
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await inject(app, pilot, Poll(frames(5, **HOL)))
        await pilot.pause()
        assert "3 scheduler" in text_of(app)
        assert "? help" in text_of(app).splitlines()[0]


async def test_an_engine_read_from_outside_shows_what_is_inferred_and_offers_no_fix():
    """Frames from a vLLM-shaped /metrics (the exposition fixtures, served for real), as `tui --engine vllm`
    gets them: what is inferred says so, what is not observable says so, and there is no fix to apply."""
    from stagelens.commands.flags import OutsideFlags, open_engine_source
    from stagelens.tui.outside_feed import OutsideFeed
    from tests.helpers.engine_stub import DGX, Engine, fixture

    engine = Engine(fixture("vllm_v1_new_names.txt"))
    source = OutsideFeed(open_engine_source("vllm", OutsideFlags(engine.url)), DGX, interval=0.5)
    try:
        source.open()
        polls = [source.poll()]
        engine.body = fixture("vllm_v1_new_names.next.txt")
        polls += [source.poll() for _ in range(4)]
    finally:
        source.close()
        engine.close()
    app = make_app(source)
    async with app.run_test(size=(160, 48)) as pilot:
        await inject(app, pilot, *polls)
        screen = text_of(app)
        assert "FIRING" in screen and "inferred" in screen
        assert "apply fix" not in screen
        await pilot.press("2")       # the KV panel
        screen = text_of(app)
        assert "not observable on this engine" in screen
