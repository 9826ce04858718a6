"""The top bar: node, engine, the source (live / stale / replay / paused), refresh interval, `?
help`."""

from __future__ import annotations

from rich.text import Text

from stagelens.diagnosis.evaluate import engine_failure
from stagelens.fmt import clock
from stagelens.tui.state import TuiState
from stagelens.tui.widgets.lines import RenderedLines


def source_badge(info: dict, engine_down: bool = False) -> tuple[str, str]:
    """(text, style) of the source's condition."""
    kind = info.get("kind")
    if engine_down and kind != "replay":
        return "✖ ENGINE DOWN", "bold white on red"
    if info.get("error"):
        return "▲ STALE", "bold white on red"
    if kind == "replay":
        shown, total = info.get("position") or (0, 0)
        mark = "⏸" if info.get("paused") else "▶"
        return f"{mark} REPLAY {shown}/{total}", "bold black on cyan"
    if info.get("paused"):
        return "⏸ PAUSED", "bold black on yellow"
    if not info.get("has_frames"):
        return "… STARTING", "bold black on grey70"
    return "● LIVE", "bold black on green"


def engine_summary(state: TuiState) -> str:
    last = state.last
    if last is None or last.engine is None:
        return "no engine"
    cfg = last.engine.engine
    return f"{cfg.model or '?'} {cfg.allocator or '?'} {cfg.device or '?'}"


class TopBar(RenderedLines):
    def refresh_from(self, state: TuiState, info: dict) -> None:
        width = self.size.width or 80
        last = state.last
        badge, style = source_badge(info, engine_failure(last) is not None)
        sep = ("│", "grey50")
        # the pieces, least important last: dropped from the end of this list until the line fits
        pieces = [
            [(" stagelens ", "bold reverse"), (f" {last.node if last else '-'} ", "bold")],
            [sep, (f" {badge} ", style)],
            [sep, (f" every {info.get('interval', 1.0):g}s ", "")],
            [sep, (f" {clock(last.time_unix if last else None)} ", "")],
            [sep, (f" {engine_summary(state)} ", "")],
            [(f" {info.get('label', '')} ", "grey70")],
        ]
        help_text = (" ? help ", "bold reverse")
        while len(pieces) > 2 and sum(len(t) for p in pieces for t, _ in p) + len(help_text[0]) > width:
            pieces.pop()
        text = Text.assemble(*[piece for p in pieces for piece in p])
        pad = width - text.cell_len - len(help_text[0])
        text.append(" " * max(0, pad))
        text.append(*help_text)
        self.update(text)
