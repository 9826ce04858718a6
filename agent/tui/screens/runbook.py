"""A runbook from `runbooks/`, rendered as Markdown; a clear message when it is missing."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Markdown, Static

from stagelens.runbook_files import find_runbook, runbook_file, runbook_ref, runbook_stem


def load_runbook(name: str, directory: Path | None = None) -> tuple[str, str | None]:
    """(path or name shown, Markdown text or None when there is no such runbook); `directory`
    instead of the installed runbooks (agent.runbook_files)."""
    stem = runbook_stem(name)
    if directory is None:
        path = find_runbook(stem)
        if path is None:
            return runbook_ref(stem), None
    else:
        path = Path(directory) / runbook_file(stem)
        if not path.is_file():
            return str(path), None
    try:
        return str(path), path.read_text(encoding="utf-8")
    except OSError:
        return str(path), None


class RunbookScreen(Screen[None]):
    BINDINGS = [Binding("escape,q,enter", "app.pop_screen", "back")]

    def __init__(self, name: str, directory: Path | None = None) -> None:
        """`name`: the alert, or its runbook's file name or reference (runbooks/<alert>.md)."""
        super().__init__()
        self.runbook = runbook_stem(name)
        self.where, self.text = load_runbook(name, directory)

    def compose(self) -> ComposeResult:
        yield Static(f" runbook {self.runbook}  ·  {self.where}  ·  esc: back", id="runbook-title")
        with VerticalScroll(id="runbook-body"):
            if self.text is None:
                yield Static(f"runbook not found: {self.where}\n\nThe runbooks live in "
                             f"{runbook_ref('<AlertName>')}; `stagelens runbook NAME` lists the "
                             f"known ones.", id="runbook-missing")
            else:
                yield Markdown(self.text, id="runbook-markdown")
