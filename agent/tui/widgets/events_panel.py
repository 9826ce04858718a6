"""Panel 5: the event log — every stage transition with the signals behind it, and fixes applied."""

from __future__ import annotations

from rich.text import Text

from stagelens.fmt import STATE_COLOR, STATE_MARK, clock
from stagelens.tui.drawing.cell_table import CellTable, Column
from stagelens.tui.state import TuiState
from stagelens.tui.widgets.panel import Panel
from stagelens.vocabulary import STAGE_NAMES


class EventsPanel(Panel):
    KEY = "5"
    TITLE = "events"

    def render_state(self, state: TuiState, app_info: dict):
        if not state.log:
            return Text("no stage has changed state yet", style="grey50")
        table = CellTable([Column(), Column(), Column(), Column(flex=1)], show_header=False)
        rows = 12 if app_info.get("tall") else 6
        for entry in list(state.log)[::-1][:rows]:
            if entry.stage is None:
                table.add_row(clock(entry.time_unix), Text("fix", style="bold cyan"), "", entry.text)
                continue
            change = Text.assemble((STATE_MARK[entry.old], STATE_COLOR[entry.old]), " → ",
                                   (STATE_MARK[entry.new], f"bold {STATE_COLOR[entry.new]}"))
            table.add_row(clock(entry.time_unix), STAGE_NAMES[entry.stage], change, entry.text)
        return table
