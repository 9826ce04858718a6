"""The stagelens TUI: top bar, verdict strip, five panels, key bar; collection in a worker thread.

The worker only polls the source and posts `Polled` messages; everything else — folding the poll
into `TuiState`, diagnosing, drawing — happens here on the UI thread, inside `batch_update`. Tests
post the same messages with the worker off (`autopoll=False`) and the clock is always a frame's own
time.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
from collections.abc import Callable, Iterable
from pathlib import Path

from textual.actions import SkipAction
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen

from stagelens.diagnosis import DiagnosisConfig
from stagelens.tui.commands import PANELS, stagelens_commands
from stagelens.tui.feed import Feed
from stagelens.tui.messages import Polled
from stagelens.tui.notices import PlainNotices
from stagelens.tui.poller import Poller
from stagelens.tui.screens.help import HelpScreen
from stagelens.tui.screens.runbook import RunbookScreen
from stagelens.tui.screens.topology import TopologyScreen
from stagelens.tui.state import TuiState
from stagelens.tui.style import CSS
from stagelens.tui.widgets.cold_panel import ColdPanel
from stagelens.tui.widgets.events_panel import EventsPanel
from stagelens.tui.widgets.gpu_panel import GpuPanel
from stagelens.tui.widgets.keybar import KeyBar
from stagelens.tui.widgets.kv_panel import KvPanel
from stagelens.tui.widgets.scheduler_panel import SchedulerPanel
from stagelens.tui.widgets.topbar import TopBar
from stagelens.tui.widgets.verdict import VerdictStrip

INTERVALS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
WIDE = 120          # columns from which the panels sit in two columns
TALL = 40           # rows from which plots and lists get taller
STAGE_PANEL = {"kv_cache": "2", "scheduler": "3", "cold_path": "4"}


def catch_stop_signals(app: App, handler: Callable[[], object]) -> None:
    """SIGTERM, SIGHUP and SIGINT call `handler` while `app` runs in a terminal (headless tests:
    left alone)."""
    if not app.is_headless:
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, handler)


def release_stop_signals(app: App) -> None:
    if not app.is_headless:
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


class StagelensApp(PlainNotices, App[int]):
    CSS = CSS
    TITLE = "stagelens"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        *[Binding(key, f"toggle_panel('{key}')", name, show=False) for key, name in PANELS.items()],
        Binding("space,p", "pause", "pause"),
        Binding("r", "refresh", "refresh"),
        Binding("plus,equals_sign", "interval(1)", "slower", show=False),
        Binding("minus", "interval(-1)", "faster", show=False),
        Binding("t", "topology", "topology"),
        Binding("enter", "runbook", "runbook"),
        Binding("f", "apply_fix", "apply fix"),
        Binding("ctrl+s", "save_svg", "screenshot", priority=True),
        # before the scrolling panels' own left/right/home/end, in replay only (else SkipAction
        # passes them on)
        Binding("left_square_bracket,left", "seek(-10)", "seek back", show=False, priority=True),
        Binding("right_square_bracket,right", "seek(10)", "seek forward", show=False, priority=True),
        Binding("home", "seek_start", show=False, priority=True),
        Binding("end", "seek_end", show=False, priority=True),
    ]

    def __init__(self, source: Feed, *, interval: float = 1.0,
                 config: DiagnosisConfig | None = None, autopoll: bool = True,
                 screenshot_dir: str | Path = ".", runbook_dir: Path | None = None,
                 notice: str | None = None) -> None:
        super().__init__()
        self.source = source
        self.state = TuiState(config)
        self.poller = Poller(source, self.post_message, interval)
        self._last_shown: tuple | None = None
        self.autopoll = autopoll
        self.screenshot_dir = Path(screenshot_dir)
        self.runbook_dir = runbook_dir
        self.info: dict = {"kind": source.kind, "label": source.label, "interval": interval,
                           "error": None, "note": None, "position": None, "paused": source.paused,
                           "can_fix": source.can_fix, "has_frames": False, "tall": False}
        self._root: str | None = None
        # said once at start (how the source is judged, when it matters)
        self.notice = notice
        self.stopped_by_signal = False

    # --- layout -----------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield TopBar(id="topbar")
        yield VerdictStrip(id="verdict")
        with VerticalScroll(id="panels"):
            yield GpuPanel()
            yield KvPanel()
            yield SchedulerPanel()
            yield ColdPanel()
            yield EventsPanel()
        yield KeyBar(id="keybar")

    @property
    def panels(self) -> list:
        return list(self.query(".panel"))

    def panel(self, key: str):
        return self.query_one(f"#panel-{key}")

    def on_mount(self) -> None:
        catch_stop_signals(self, self.stop_by_signal)
        self._apply_size()
        self.redraw()
        if self.notice:
            self.notify(self.notice, severity="warning", timeout=10)
        if self.autopoll:
            self.run_worker(self.poller.run, thread=True, name="poller", group="poller",
                            exit_on_error=False)

    def on_unmount(self) -> None:
        release_stop_signals(self)
        self.poller.stop()

    def stop_by_signal(self) -> None:
        """SIGTERM/SIGHUP/SIGINT quit like `q`: the terminal restored, a local engine stopped."""
        self.stopped_by_signal = True
        self.exit()

    def on_resize(self) -> None:
        self._apply_size()
        self.call_after_refresh(self.redraw)

    def _apply_size(self) -> None:
        width, height = self.size
        self.query_one("#panels").set_class(width >= WIDE, "wide")
        self.info["tall"] = height >= TALL

    # --- polls ------------------------------------------------------------------------------------
    def on_polled(self, message: Polled) -> None:
        poll = message.poll
        self.info["error"] = poll.error
        if poll.note:
            self.info["note"] = poll.note
        if poll.position is not None:
            self.info["position"] = poll.position
            self.info["paused"] = self.source.paused
        changed = bool(poll.frames or poll.reset or poll.timelines)
        if changed:
            self.state.add(poll.frames, poll.timelines, poll.reset)
        self.info["has_frames"] = self.state.last is not None
        shown = (poll.error, poll.note, poll.position, self.source.paused)
        # nothing new: leave the screen as it is (idle costs ~nothing)
        if changed or shown != self._last_shown:
            self._last_shown = shown
            self.redraw()

    def poll_once(self) -> None:
        """One poll on this thread, posted like the worker's (tests, and refresh without the
        worker)."""
        self.poller.poll_once()

    def request_poll(self) -> None:
        if self.autopoll:
            self.poller.wake()
        else:
            self.poll_once()

    def redraw(self) -> None:
        with self.batch_update():
            self.query_one(TopBar).refresh_from(self.state, self.info)
            self.query_one(VerdictStrip).refresh_from(self.state, self.info)
            self.query_one(KeyBar).refresh_from(self.info)
            for panel in self.panels:
                if panel.display:
                    panel.refresh_from(self.state, self.info)
        root = self.state.diagnosis.root_stage if self.state.diagnosis else None
        if root != self._root:
            self._root = root
            if root and not self.query_one("#panels").has_class("wide"):
                self.call_after_refresh(self._show_panel, STAGE_PANEL[root])

    def _show_panel(self, key: str) -> None:
        panel = self.panel(key)
        if panel.display:
            self.query_one("#panels", VerticalScroll).scroll_to_widget(panel, animate=False, top=True)

    # --- actions ----------------------------------------------------------------------------------
    def action_toggle_panel(self, key: str) -> None:
        panel = self.panel(key)
        panel.display = not panel.display
        if panel.display:
            panel.refresh_from(self.state, self.info)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_pause(self) -> None:
        self.source.set_paused(not self.source.paused)
        self.info["paused"] = self.source.paused
        self.redraw()
        if not self.source.paused:
            self.request_poll()

    def action_refresh(self) -> None:
        self.request_poll()

    def action_interval(self, step: int) -> None:
        now = self.poller.interval
        index = min(range(len(INTERVALS)), key=lambda i: abs(INTERVALS[i] - now))
        new = INTERVALS[max(0, min(len(INTERVALS) - 1, index + step))]
        self.poller.interval = self.info["interval"] = new
        self.redraw()
        self.notify(f"refresh every {new:g} s", timeout=2)
        self.poller.wake()

    def action_topology(self) -> None:
        last = self.state.last
        self.push_screen(TopologyScreen(last.node_sample if last else None))

    def action_runbook(self) -> None:
        d = self.state.diagnosis
        if d is None or d.root_stage is None:
            self.notify("no stage is warning or firing: no runbook to open (ctrl+p lists every stage's runbook)",
                        timeout=4)
            return
        self.open_runbook(d.stage(d.root_stage).runbook)

    def open_runbook(self, path: str) -> None:
        self.push_screen(RunbookScreen(path, self.runbook_dir))

    def screenshot_name(self) -> str:
        last = self.state.last
        if last is None:
            return "stagelens.svg"
        stamp = dt.datetime.fromtimestamp(last.time_unix, dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        return f"stagelens-{last.node}-{stamp}.svg"

    def action_save_svg(self) -> None:
        try:
            self.screenshot_dir.mkdir(parents=True, exist_ok=True)
            path = self.save_screenshot(self.screenshot_name(), str(self.screenshot_dir))
        except OSError as exc:
            self.notify(f"screenshot not saved: {exc.strerror}: {self.screenshot_dir}",
                        severity="error")
            return
        self.notify(f"screenshot saved: {path}", timeout=6)

    def action_apply_fix(self) -> None:
        from stagelens.lab.fixes import as_flags, fix_flags

        d = self.state.diagnosis
        flags = fix_flags(d) if d is not None else {}
        if not self.source.can_fix:
            hint = f" — the recommended engine flags: {as_flags(flags)}" if flags else ""
            self.notify(f"apply fix works with the local lab engine only{hint}", severity="warning",
                        timeout=6)
            return
        if not flags:
            self.notify("nothing to apply: no stage recommends an engine setting", timeout=4)
            return
        text = as_flags(flags)
        # the run so far, before the restart
        window = getattr(self.source, "whatif_window", lambda: None)()
        self.state.mark_fix(flags, text)
        self.source.apply_fix(flags)
        self.notify(f"restarting the engine with {text}", timeout=6)
        if window:
            frames, fix = list(self.state.frames), self.state.fix
            self.run_worker(lambda: self._predict_fix(window, frames, d, fix), thread=True, group="whatif",
                            exit_on_error=False)
        self.redraw()
        self.request_poll()

    def _predict_fix(self, window: dict, frames: list, diagnosis, fix) -> None:
        """On a worker thread: the fix's predicted effect on the run before it (stagelens
        whatif)."""
        from stagelens.whatif.fix_effect import predicted_effect
        from stagelens.whatif.workload import observed_from_window

        effect = predicted_effect(lambda: observed_from_window("the local engine", window, frames), diagnosis)
        if effect is not None:
            self.call_from_thread(self._show_prediction, effect, fix)

    def _show_prediction(self, effect: dict, fix) -> None:
        """A notice, and the prediction beside the before/after of the same fix (panel 3)."""
        from stagelens.whatif.fix_effect import after_figures, short_effect

        self.notify(short_effect(effect), timeout=12)
        if fix is not None and fix is self.state.fix:
            fix.predicted = after_figures(effect)
            self.redraw()

    def _replay_on_dashboard(self) -> None:
        """Seek keys act on a replay, on the dashboard; anywhere else they keep their usual
        meaning."""
        if self.source.kind != "replay" or self.screen is not self.screen_stack[0]:
            raise SkipAction()

    def action_seek(self, delta: int) -> None:
        self._replay_on_dashboard()
        self.source.seek(delta)
        self.request_poll()

    def action_seek_start(self) -> None:
        self._replay_on_dashboard()
        self.source.seek_to(1)
        self.request_poll()

    def action_seek_end(self) -> None:
        self._replay_on_dashboard()
        self.source.seek_to(self.source.total)
        self.request_poll()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield from stagelens_commands(self)
