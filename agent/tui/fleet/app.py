"""The fleet screen: one row a node, most severe first, refreshed from Prometheus on a thread.

The refresh thread (refresher.py) only fetches and posts `Fetched` messages; sorting (once an
answer), filtering (once an answer or a filter) and drawing happen here on the UI thread. Tests post
the same messages with the thread off (`autopoll=False`).

`Enter` on a node ends this app with the node's agent URL as its return value: `run_fleet_app`
(__init__.py) then runs that node's own TUI and, when it is left, a new fleet screen from this one's
`memory` (the last answer, the filter, the selected node), so the fleet comes back as it was left.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rich.console import Group
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Input

from stagelens.catalogue import TARGET_URL_LABEL
from stagelens.fleet.model import FleetView, NodeRow, by_severity
from stagelens.tui.app import catch_stop_signals, release_stop_signals
from stagelens.tui.fleet.cells import (
    FilterError,
    columns,
    detail_lines,
    fit,
    parse_filter,
    row_cells,
    row_matches,
    summary_lines,
    top_line,
)
from stagelens.tui.fleet.help import FleetHelpScreen
from stagelens.tui.fleet.refresher import Refresher
from stagelens.tui.notices import PlainNotices
from stagelens.tui.style import CSS
from stagelens.tui.widgets.keybar import key_line
from stagelens.tui.widgets.lines import RenderedLines

WIDE = 120           # columns from which the table shows the targets' labels too
KEYS = [("q", "quit"), ("?", "help"), ("⏎", "open node"), ("/", "filter"), ("esc", "clear filter"),
        ("r", "refresh"), ("↑↓", "select")]

FLEET_CSS = """
#fleet-top { height: 1; dock: top; }
#fleet-keys { height: 1; dock: bottom; background: $panel; }
#fleet-summary { height: auto; }
#fleet-table { height: 1fr; scrollbar-size-vertical: 1; scrollbar-size-horizontal: 1; }
#fleet-detail { height: auto; border-top: solid $primary-darken-1; padding: 0 1; }
#fleet-filter { height: 1; border: none; padding: 0 1; display: none; background: $boost; }
#fleet-filter.-open { display: block; }
#fleet-filter.-invalid { color: $error; }
"""


class Fetched(Message):
    """One answer of the fleet query (its rows, or the last rows with the reason it failed)."""

    def __init__(self, view: FleetView) -> None:
        super().__init__()
        self.view = view


@dataclass
class FleetMemory:
    """What a fleet screen hands to the next one when a node's own TUI is closed."""
    view: FleetView | None = None
    filter_text: str = ""
    selected: str | None = None        # the selected node's instance
    # said once when the next screen opens (a node that could not be opened)
    notice: str | None = None


class Bar(RenderedLines):
    pass


class NodeTable(DataTable):
    """One row a node; home and end go to the first and last node (DataTable's scroll sideways)."""
    BINDINGS = [Binding("home", "scroll_top", "first node", show=False),
                Binding("end", "scroll_bottom", "last node", show=False)]


class FleetApp(PlainNotices, App[str | None]):
    """Returns the agent URL of the node to open, or None to quit."""
    CSS = CSS + FLEET_CSS
    TITLE = "stagelens fleet"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        Binding("r", "refresh", "refresh"),
        Binding("slash", "open_filter", "filter"),
        Binding("escape", "clear_filter", "clear filter", show=False),
    ]

    def __init__(self, query, interval: float = 5.0, *, autopoll: bool = True,
                 memory: FleetMemory | None = None, refresher: Refresher | None = None) -> None:
        super().__init__()
        self.fleet_query = query
        self.interval = interval
        self.autopoll = autopoll
        self.memory = memory or FleetMemory()
        self.view: FleetView | None = self.memory.view
        self.prometheus = getattr(query, "prometheus_url", "") or (self.view.prometheus if self.view else "")
        # checked before it was kept
        self._labels, self._words = parse_filter(self.memory.filter_text)
        self._rows = sorted(self.view.rows, key=by_severity) if self.view is not None else []
        self.shown: list[NodeRow] = []      # the rows the filter keeps, most severe first
        self._refilter()
        self._table_key: tuple | None = None
        self._refresher = refresher
        self._owns_refresher = refresher is None
        self.stopped_by_signal = False

    # --- layout -----------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Bar(id="fleet-top")
        yield Bar(id="fleet-summary")
        yield NodeTable(id="fleet-table", cursor_type="row", zebra_stripes=False)
        yield Bar(id="fleet-detail")
        yield Input(value=self.memory.filter_text,
                    placeholder="LABEL=VALUE … e.g. cluster=eu-1 gpu=h100", id="fleet-filter")
        yield Bar(id="fleet-keys")

    @property
    def table(self) -> DataTable:
        return self.query_one("#fleet-table", DataTable)

    @property
    def filter_input(self) -> Input:
        return self.query_one("#fleet-filter", Input)

    def on_mount(self) -> None:
        # they end the fleet like `q`, the terminal restored
        catch_stop_signals(self, self.stop_by_signal)
        self.table.focus()
        self.redraw()
        if self.memory.notice:
            self.notify(self.memory.notice, severity="warning", timeout=8)
            self.memory.notice = None
        if self.autopoll:
            if self._refresher is None:
                self._refresher = Refresher(self.fleet_query, self.interval)
            self._refresher.attach(lambda view: self.post_message(Fetched(view)))

    def on_unmount(self) -> None:
        release_stop_signals(self)
        if self._refresher is not None:
            self._refresher.detach()
            if self._owns_refresher:
                self._refresher.stop()

    def stop_by_signal(self) -> None:
        self.stopped_by_signal = True
        self.exit(None)

    def on_resize(self) -> None:
        self.call_after_refresh(self.redraw)

    # --- answers ----------------------------------------------------------------------------------
    def on_fetched(self, message: Fetched) -> None:
        self.show(message.view)

    def show(self, view: FleetView) -> None:
        """An answer on screen; a failed one with no rows keeps the rows shown (and their time)
        with its reason."""
        if view.error and not view.rows and self.view is not None and self.view.rows:
            view = replace(view, rows=self.view.rows, fetched_unix=self.view.fetched_unix)
        self.view = self.memory.view = view
        self._rows = sorted(view.rows, key=by_severity)
        self._refilter()
        self.redraw()

    def refresh_now(self) -> None:
        """One fetch on this thread (tests, and `r` with the refresh thread off)."""
        self.show(self.fleet_query.fetch())

    def _refilter(self) -> None:
        self.shown = [row for row in self._rows if row_matches(row, self._labels, self._words)]

    # --- drawing ----------------------------------------------------------------------------------
    def redraw(self) -> None:
        view = self.view
        width = self.size.width or 80
        with self.batch_update():
            self.query_one("#fleet-top", Bar).update(top_line(view, self.prometheus, self.interval, width))
            self.query_one("#fleet-summary", Bar).update(Group(*summary_lines(
                view, self.shown, self.memory.filter_text,
                getattr(self.fleet_query, "selector", None))))
            self._fill_table(width >= WIDE)
            self._show_detail()
            self._show_keys(width)

    def _fill_table(self, wide: bool) -> None:
        table = self.table
        now = self.view.fetched_unix if self.view is not None else None
        cells = [row_cells(row, now, wide) for row in self.shown]
        key = (self.size.width, tuple(tuple(c.markup for c in row) for row in cells))
        # the same answer again: leave the table (and its scroll) as it is
        if key == self._table_key:
            return
        selected = self.memory.selected
        cols = columns(wide)
        widths = fit(cells, [label for _, label in cols], self.size.width or 80,
                     [k for k, _ in cols].index("agent" if wide else "evidence"), table.cell_padding)
        table.clear(columns=True)
        for (col, label), col_width in zip(cols, widths, strict=True):
            table.add_column(label, key=col, width=col_width)
        self._table_key = key
        for row in cells:
            table.add_row(*row)
        index = next((i for i, row in enumerate(self.shown) if row.instance == selected), 0)
        if self.shown:
            table.move_cursor(row=index, animate=False, scroll=True)
        self.memory.selected = self.shown[index].instance if self.shown else selected

    def _show_detail(self) -> None:
        now = self.view.fetched_unix if self.view is not None else None
        width = self.query_one("#fleet-detail", Bar).content_region.width or (self.size.width or 80) - 2
        self.query_one("#fleet-detail", Bar).update(Group(*detail_lines(self.selected_row, now, width)))

    def _show_keys(self, width: int) -> None:
        self.query_one("#fleet-keys", Bar).update(key_line(KEYS, width))

    @property
    def selected_row(self) -> NodeRow | None:
        row = self.table.cursor_row
        return self.shown[row] if self.shown and 0 <= row < len(self.shown) else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        row = self.selected_row
        if row is not None:
            self.memory.selected = row.instance
        self._show_detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.open_selected()

    # --- actions ----------------------------------------------------------------------------------
    def open_selected(self) -> None:
        row = self.selected_row
        if row is None:
            return
        if not row.url:
            self.notify(f"{row.instance}: no agent URL to open (give its target a {TARGET_URL_LABEL} label)",
                        severity="warning", timeout=6)
            return
        self.memory.selected = row.instance
        self.exit(row.url)

    def action_help(self) -> None:
        self.push_screen(FleetHelpScreen())

    def action_refresh(self) -> None:
        if self.autopoll and self._refresher is not None:
            self._refresher.wake()
        else:
            self.refresh_now()

    def action_open_filter(self) -> None:
        box = self.filter_input
        box.add_class("-open")
        box.focus()

    def action_clear_filter(self) -> None:
        self.set_filter("")
        box = self.filter_input
        box.value = ""
        box.remove_class("-open", "-invalid")
        self.table.focus()

    def set_filter(self, text: str) -> bool:
        """Apply `text` as the filter; False (and the filter unchanged) when it does not parse."""
        try:
            labels, words = parse_filter(text)
        except FilterError as exc:
            self.filter_input.add_class("-invalid")
            self.filter_input.tooltip = str(exc)
            return False
        self.filter_input.remove_class("-invalid")
        self._labels, self._words = labels, words
        self.memory.filter_text = " ".join(text.split())
        self._refilter()
        self.redraw()
        return True

    def on_input_changed(self, event: Input.Changed) -> None:
        # narrows as it is typed; a half-typed term is not applied
        self.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.set_filter(event.value):      # kept: the summary line shows it, `/` opens it again
            self.filter_input.remove_class("-open")
            self.table.focus()
        else:
            self.notify(str(self.filter_input.tooltip), severity="warning", timeout=4)
