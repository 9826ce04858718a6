"""CellTable, the dashboard's tables: one line a row at any width, bars taking what text leaves."""

from __future__ import annotations

import io

from rich.console import Console

from stagelens.tui.drawing.bars import Bar, LinkStrip
from stagelens.tui.drawing.cell_table import CellTable, Column


def lines_at(table: CellTable, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    return ["".join(s.text for s in line) for line in console.render_lines(table, console.options, pad=False)]


def gpu_like_table() -> CellTable:
    table = CellTable([Column("GPU"), Column("util", "right"), Column("PCIe link"), Column("use", flex=1, min_width=6),
                       Column("", "right")])
    for n, (util, ratio) in enumerate([("5%", 0.1), ("100%", 0.9)]):
        table.add_row(f"GPU{n}", util, "G4x16/G4x16", Bar(ratio, max_width=60), f"{ratio:.0%}")
    return table


def test_a_wide_table_fills_the_width_with_its_bars_and_aligns_its_numbers_right():
    rows = lines_at(gpu_like_table(), 70)
    assert len(rows) == 3 and all(len(r.rstrip()) <= 70 for r in rows)
    assert rows[1].index("5%") + 2 == rows[2].index("100%") + 4           # right-justified: the ends line up
    filled = [r.count("█") for r in rows[1:]]
    assert filled[1] > 5 * filled[0] and filled[1] >= 30                  # the bar took the spare width


def test_a_narrow_table_keeps_one_line_a_row_and_shortens_its_widest_cells():
    for width in (40, 30, 20):
        rows = lines_at(gpu_like_table(), width)
        assert len(rows) == 3, width                                        # never wraps
        assert all(len(r.rstrip()) <= width for r in rows), width
    assert "…" in "".join(lines_at(gpu_like_table(), 30))                   # what is cut says so
    assert "G4x16/G4x16" in lines_at(gpu_like_table(), 34)[1]               # a gap of one before any cut


def test_a_link_strip_draws_each_link_against_its_cap_or_the_busiest_when_too_narrow():
    strip = LinkStrip([0.0, 0.5, 0.99, None], warn=0.85, firing=0.95)
    wide = strip.to_text(10)
    assert wide.plain == "▕▁▄█?▏"                    # idle, half, full, not measured yet
    colours = {wide.plain[s.start:s.end]: str(s.style) for s in wide.spans}
    assert colours["▁"] == "green" and colours["█"] == "red" and colours["?"] == "grey50"
    narrow = strip.to_text(5)                          # no room for a cell a link: the busiest link's bar
    assert narrow.cell_len == 5 and "██" in narrow.plain
