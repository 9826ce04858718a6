"""A history plot a few rows high: one column a sample, warn and firing drawn as lines across it."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style

from stagelens.diagnosis.evaluate import threshold_level
from stagelens.fmt import STATE_COLOR
from stagelens.tui.drawing.bars import EIGHTHS, VBLOCKS

_STYLES = {color: Style(color=color) for color in ("green", "yellow", "red")}
_LINE_STYLES = {color: Style(color=color, dim=True) for color in ("yellow", "red")}
_GREY30, _GREY50, _PLAIN = Style(color="grey30"), Style(color="grey50"), Style()


class HistoryPlot:
    """`values` oldest first (None: no data); the newest sample sits at the right edge.

    `direction` "above": higher is worse (a value over `firing` is red); "below": lower is worse.
    The right-hand axis labels the warn and firing lines.
    """

    AXIS = 6

    def __init__(self, values: list[float | None], warn: float | None = None,
                 firing: float | None = None, direction: str = "above", height: int = 3,
                 top: float | None = None) -> None:
        self.values, self.warn, self.firing, self.direction = values, warn, firing, direction
        self.height = height
        known = [v for v in values if v is not None]
        candidates = [v for v in (*known, warn, firing) if v is not None]
        self.top = top if top is not None else max([*candidates, 1e-9]) * 1.15

    def _state(self, v: float) -> str:
        return STATE_COLOR[threshold_level(v, self.warn, self.firing, self.direction)]

    def _line_row(self, level: float | None) -> int | None:
        if level is None or level > self.top:
            return None
        return min(self.height - 1, int(level / self.top * self.height))

    def _cell(self, v: float | None, row: int, newest_known: bool, line_style: Style | None) -> tuple[str, Style]:
        if v is None:
            if line_style:
                return "╌", line_style
            return ("·" if row == 0 and newest_known else " "), _GREY30
        fill = max(0.0, v) / self.top * self.height - row
        if fill >= 1:
            return "█", _STYLES[self._state(v)]
        if fill > 0:
            return VBLOCKS[max(1, int(fill * 8))], _STYLES[self._state(v)]
        return ("╌", line_style) if line_style else (" ", _PLAIN)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(4, options.max_width - self.AXIS)
        values = self.values[-width:]
        pad = width - len(values)
        lines = {}
        for _name, level, color in (("warn", self.warn, "yellow"), ("firing", self.firing, "red")):
            row = self._line_row(level)
            if row is not None:
                lines[row] = (level, color)      # firing wins a shared row: it is drawn last
        for row in range(self.height - 1, -1, -1):
            line_style = _LINE_STYLES[lines[row][1]] if row in lines else None
            # consecutive cells of one style are one segment: a plot row is a handful of segments,
            # not 70
            run, run_style = [], None
            for i in range(width):
                char, style = self._cell(values[i - pad] if i >= pad else None, row, i >= pad,
                                         line_style)
                if style is not run_style and run:
                    yield Segment("".join(run), run_style)
                    run = []
                run.append(char)
                run_style = style
            if run:
                yield Segment("".join(run), run_style)
            if row in lines:
                level, color = lines[row]
                yield Segment(f"┤{level:<{self.AXIS - 1}.3g}"[: self.AXIS], _STYLES[color])
            elif row == self.height - 1:
                yield Segment(f"┤{self.top:<{self.AXIS - 1}.3g}"[: self.AXIS], _GREY50)
            else:
                yield Segment("│" + " " * (self.AXIS - 1), _GREY50)
            yield Segment.line()


__all__ = ["EIGHTHS", "HistoryPlot"]
