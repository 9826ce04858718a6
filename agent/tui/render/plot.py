"""A history plot a few rows high: one column a sample, warn and firing drawn as lines across it."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style

from agent.diagnosis.evaluate import threshold_level
from agent.tui.render.bars import EIGHTHS

_VBLOCKS = " ▁▂▃▄▅▆▇█"
_COLOURS = {"ok": "green", "warn": "yellow", "firing": "red"}


class HistoryPlot:
    """`values` oldest first (None: no data); the newest sample sits at the right edge.

    `direction` "above": higher is worse (a value over `firing` is red); "below": lower is worse.
    The right-hand axis labels the warn and firing lines.
    """

    AXIS = 6

    def __init__(self, values: list[float | None], warn: float | None = None, firing: float | None = None,
                 direction: str = "above", height: int = 3, top: float | None = None) -> None:
        self.values, self.warn, self.firing, self.direction = values, warn, firing, direction
        self.height = height
        known = [v for v in values if v is not None]
        candidates = [v for v in (*known, warn, firing) if v is not None]
        self.top = top if top is not None else max([*candidates, 1e-9]) * 1.15

    def _state(self, v: float) -> str:
        return _COLOURS[threshold_level(v, self.warn, self.firing, self.direction)]

    def _line_row(self, level: float | None) -> int | None:
        if level is None or level > self.top:
            return None
        return min(self.height - 1, int(level / self.top * self.height))

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
            line_style = Style(color=lines[row][1], dim=True) if row in lines else None
            for i in range(width):
                v = values[i - pad] if i >= pad else None
                if v is None:
                    if line_style:
                        yield Segment("╌", line_style)
                    else:
                        yield Segment("·" if row == 0 and i >= pad else " ", Style(color="grey30"))
                    continue
                fill = max(0.0, v) / self.top * self.height - row
                if fill >= 1:
                    yield Segment("█", Style(color=self._state(v)))
                elif fill > 0:
                    yield Segment(_VBLOCKS[max(1, int(fill * 8))], Style(color=self._state(v)))
                elif line_style:
                    yield Segment("╌", line_style)
                else:
                    yield Segment(" ")
            if row in lines:
                level, color = lines[row]
                yield Segment(f"┤{level:<{self.AXIS - 1}.3g}"[: self.AXIS], Style(color=color))
            elif row == self.height - 1:
                yield Segment(f"┤{self.top:<{self.AXIS - 1}.3g}"[: self.AXIS], Style(color="grey50"))
            else:
                yield Segment("│" + " " * (self.AXIS - 1), Style(color="grey50"))
            yield Segment.line()


__all__ = ["EIGHTHS", "HistoryPlot"]
