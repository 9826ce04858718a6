"""The node TUI as the fleet opens it: `stagelens tui --connect`'s app, with `Esc` to go back to
the fleet."""

from __future__ import annotations

from textual.binding import Binding

from stagelens.tui.app import StagelensApp


class NodeApp(StagelensApp):
    """`q` or `Esc` leave it for the fleet (a screen on top, a runbook say, takes its `Esc`
    first); a signal ends the fleet as well as this TUI (`stopped_by_signal`)."""
    BINDINGS = [Binding("escape", "quit", "back to the fleet", show=False)]
