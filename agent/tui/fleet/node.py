"""The node TUI as the fleet opens it: `stagelens tui --connect`'s app, with `Esc` to go back to the fleet."""

from __future__ import annotations

import asyncio

from textual.binding import Binding

from agent.tui.app import STOP_SIGNALS, StagelensApp


class NodeApp(StagelensApp):
    """`q` or `Esc` leave it for the fleet (a screen on top, a runbook say, takes its `Esc` first); a signal ends
    the fleet as well as this TUI (`stopped_by_signal`)."""
    BINDINGS = [Binding("escape", "quit", "back to the fleet", show=False)]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stopped_by_signal = False

    def on_mount(self) -> None:
        # Textual runs this before StagelensApp.on_mount, which installs handlers that only end this app:
        # replace them once it has
        if not self.is_headless:
            self.call_later(self._own_signals)

    def _own_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal)

    def _on_signal(self) -> None:
        self.stopped_by_signal = True
        self.exit()
