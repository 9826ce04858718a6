"""The help screen: every key, and what the states mean. Any key closes it."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("q", "quit"),
    ("?", "this help (any key closes it)"),
    ("1 … 5", "show / hide a panel: GPU & topology, KV cache, scheduler, cold path, events"),
    ("space  p", "pause collection; in a replay: play / pause"),
    ("[ ]  ← →", "replay: seek 10 frames back / forward (home, end: first / last frame)"),
    ("r", "collect now"),
    ("+  -", "refresh interval longer / shorter"),
    ("t", "topology: the nvidia-smi topo -m matrix and the link table"),
    ("enter", "the runbook of the root stage"),
    ("f", "local lab engine: apply the recommended fix (restarts the engine with it)"),
    ("ctrl+s", "save an SVG screenshot for the incident ticket"),
    ("ctrl+p", "command palette: panels, runbooks, fix, screenshot, theme"),
)

STATES = ("Each stage (KV cache, scheduler, cold path) is OK, WARN or FIRING, with hysteresis. The "
          "root stage is the cause; a stage marked (← another) is that stage's consequence. STALE: "
          "the source stopped answering; the screen keeps the last frame it got.")


def help_renderable(title: str = "stagelens — keys", keys=KEYS, legend: str = STATES) -> Group:
    table = Table(box=None, show_header=False, pad_edge=False, expand=True)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(ratio=1)
    for key, what in keys:
        table.add_row(key, what)
    return Group(Text(title, style="bold"), Text(""), table, Text(""), Text(legend, style="grey70"))


class HelpScreen(ModalScreen[None]):
    """The keys and the legend that `body` gives (a subclass, its own)."""

    def body(self) -> Group:
        return help_renderable()

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Static(self.body())

    def on_key(self, event) -> None:
        event.stop()
        self.dismiss()
