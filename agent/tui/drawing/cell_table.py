"""A table of one-line cells laid out with one pass over them: the dashboard's tables, redrawn every
frame.

Rich's Table measures and renders every cell through its own padding and console render; the GPU
table of a DGX (8 rows x 16 columns) cost ~16 ms a frame that way, a third of the TUI's CPU at 1 s
refresh. Here a column is as wide as its widest cell, flexible columns (bars, long text) share what
is left, and each row is one Text.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from stagelens.tui.drawing.bars import Bar, LinkStrip


@dataclass(frozen=True)
class Column:
    header: str = ""
    justify: str = "left"           # left | right | center
    flex: int = 0                   # > 0: a share of the width the fixed columns leave
    min_width: int = 0
    style: str = ""


Cell = Text | Bar | LinkStrip | str      # bars and strips draw themselves at their column's width


class CellTable:
    def __init__(self, columns: list[Column], *, gap: int = 2, show_header: bool = True,
                 header_style: str = "bold", expand: bool = True) -> None:
        self.columns = columns
        self.gap, self.show_header, self.header_style, self.expand = gap, show_header, header_style, expand
        self.rows: list[list[Cell]] = []

    def add_row(self, *cells: Cell) -> None:
        self.rows.append([Text(c) if isinstance(c, str) else c for c in cells])

    def _natural(self, n: int) -> int:
        col = self.columns[n]
        cells = [row[n].cell_len for row in self.rows if n < len(row) and isinstance(row[n], Text)]
        return max([len(col.header) if self.show_header else 0, *cells, col.min_width])

    def _widths(self, available: int) -> tuple[list[int], int]:
        """Column widths and the gap between columns for `available` cells: natural widths; then,
        when they do not fit, a gap of one, then the widest columns narrowed (their cells end in
        an ellipsis)."""
        natural = [self._natural(n) for n in range(len(self.columns))]
        widths = [col.min_width if col.flex else natural[n] for n, col in enumerate(self.columns)]
        gaps = len(self.columns) - 1
        gap = self.gap if sum(widths) + self.gap * gaps <= available else min(self.gap, 1)
        excess = sum(widths) + gap * gaps - available
        while excess > 0:
            widest = max(range(len(widths)), key=widths.__getitem__)
            if widths[widest] <= 3:
                break
            widths[widest] -= 1
            excess -= 1
        spare = max(0, -excess)
        flexible = [n for n, col in enumerate(self.columns) if col.flex]
        shares = sum(self.columns[n].flex for n in flexible)
        for n in flexible:
            widths[n] += spare * self.columns[n].flex // shares if self.expand else natural[n] - widths[n]
        # what integer shares leave goes to the last flexible column
        if self.expand and flexible:
            widths[flexible[-1]] += spare - sum(spare * self.columns[n].flex // shares for n in flexible)
        return widths, gap

    def _line(self, cells: list[Cell], widths: list[int], gap: int, style: str = "") -> Text:
        line = Text(style=style, no_wrap=True, overflow="ellipsis")
        for n, (col, width) in enumerate(zip(self.columns, widths, strict=False)):
            cell = cells[n] if n < len(cells) else Text("")
            text = cell.copy() if isinstance(cell, Text) else cell.to_text(width)
            if col.style and not text.style:
                text.stylize(col.style)
            text.truncate(width, overflow="ellipsis")
            pad = width - text.cell_len
            left = {"left": 0, "right": pad, "center": pad // 2}[col.justify]
            line.append(" " * left)
            line.append_text(text)
            line.append(" " * (pad - left))
            if n < len(self.columns) - 1:
                line.append(" " * gap)
        return line

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths, gap = self._widths(options.max_width)
        if self.show_header:
            yield self._line([Text(c.header) for c in self.columns], widths, gap, self.header_style)
        for row in self.rows:
            yield self._line(row, widths, gap)
