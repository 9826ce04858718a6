"""The footer: the keys that matter in this mode, as many as the width allows."""

from __future__ import annotations

from rich.text import Text

from stagelens.tui.widgets.lines import RenderedLines

COMMON = [("q", "quit"), ("?", "help"), ("1-5", "panels"), ("⏎", "runbook"), ("t", "topology"),
          ("r", "refresh"), ("+/-", "interval"), ("^s", "screenshot"), ("^p", "commands")]


def hints(info: dict) -> list[tuple[str, str]]:
    keys = list(COMMON)
    if info.get("kind") == "replay":
        keys[3:3] = [("space", "play/pause"), ("[ ]", "seek")]
    else:
        keys[3:3] = [("space", "pause")]
    if info.get("can_fix"):
        keys.insert(3, ("f", "apply fix"))
    return keys


def key_line(keys: list[tuple[str, str]], width: int) -> Text:
    """The keys and what they do, in order, as many as fit in `width` columns."""
    text = Text(no_wrap=True, end="")
    for key, label in keys:
        piece = Text.assemble((f" {key} ", "bold reverse"), f" {label} ")
        if text.cell_len + piece.cell_len > width:
            break
        text.append_text(piece)
    return text


class KeyBar(RenderedLines):
    def refresh_from(self, info: dict) -> None:
        self.update(key_line(hints(info), self.size.width or 80))
