"""The fleet screen's help: every key, and what the rows and the top line say. Any key closes it."""

from __future__ import annotations

from rich.console import Group

from stagelens.fleet.model import FRAME_STALE_S
from stagelens.tui.screens.help import HelpScreen, help_renderable

KEYS = (
    ("q", "quit"),
    ("?", "this help (any key closes it)"),
    ("↑ ↓  pgup pgdn", "select a node (home, end: the first, the last)"),
    ("enter",
     "open the node's own TUI (stagelens tui --connect its agent); q or esc there comes back here"),
    ("/", "filter: LABEL=VALUE terms, all must hold (cluster=eu-1 gpu=h100); a word alone must "
          "appear in the instance or a label; enter keeps it"),
    ("esc", "clear the filter"),
    ("r", "ask Prometheus now"),
)

LEGEND = ("One row a node, the most severe first: DOWN (Prometheus could not scrape its agent), FIRING, WARN, OK, "
          "UNKNOWN. Each stage shows its state and how long it has held it; dim states: the agent's latest frame is "
          f"older than {FRAME_STALE_S:g} s, so they are not current; ▲ after a node on a narrow screen: its agent's "
          "frames are stale or a collector fails (the pane below says which). P99 tail: the stage taking most of the "
          "P99 TTFT tail. STALE at the top: the last refresh failed; the rows are those of the last answer.")


class FleetHelpScreen(HelpScreen):
    """The node TUI's help screen (its style, any key closes it) with the fleet's keys."""

    def body(self) -> Group:
        return help_renderable("stagelens fleet — keys", KEYS, LEGEND)
