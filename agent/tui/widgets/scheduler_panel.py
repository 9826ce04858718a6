"""Panel 3: the scheduler — queue, running, wait p50/p99, busy ratio, budget use, head-of-line
share, what the waits were for, the slowest recent requests as waterfalls, and before/after a
fix."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from stagelens import catalogue as c
from stagelens.diagnosis.signals import window_tail
from stagelens.engine_hooks.records.snapshot import EngineInfo
from stagelens.fmt import STATE_COLOR, pct, ratio, seconds
from stagelens.tui.drawing.cell_table import CellTable, Column
from stagelens.tui.drawing.waterfall import Waterfall
from stagelens.tui.figures import COMPARED
from stagelens.tui.state import TuiState
from stagelens.tui.widgets.panel import Panel
from stagelens.tui.widgets.signal_rows import evidence_state, evidence_text
from stagelens.vocabulary import stage_of


def _fmt(kind: str, value) -> str:
    if value is None:
        return "-"
    return {"seconds": seconds, "ratio": ratio, "pct": pct, "count": str}.get(kind, lambda v: f"{v:.1f}")(value)


def figures_grid(state: TuiState) -> CellTable:
    f = state.figures()
    grid = CellTable([Column(), Column(), Column()], gap=2, show_header=False, expand=False)

    def cell(figure: c.Figure, value: str, label: str | None = None) -> Text:
        color = STATE_COLOR[evidence_state(state, figure.signal)[0]] if figure.signal else "white"
        return Text.assemble((f"{label or figure.label} ", "grey70"), (value, f"bold {color}"))

    decode = f.get(c.DECODE_RATE.key)
    grid.add_row(cell(c.WAITING, str(f.get(c.WAITING.key, "-")), "queue"),
                 cell(c.RUNNING, str(f.get(c.RUNNING.key, "-"))),
                 cell(c.DECIDED_WAIT_P50, seconds(f.get(c.DECIDED_WAIT_P50.key)), "wait p50"))
    grid.add_row(cell(c.DECIDED_WAIT_P99, _wait_p99(state, f.get(c.DECIDED_WAIT_P99.key)),
                      "wait p99"),
                 cell(c.BUSY, pct(f.get(c.BUSY.key))),
                 cell(c.BUSY_WHILE_WAITING, pct(f.get(c.BUSY_WHILE_WAITING.key))))
    grid.add_row(cell(c.BUDGET_USE, pct(f.get(c.BUDGET_USE.key))),
                 cell(c.HEAD_OF_LINE, ratio(f.get(c.HEAD_OF_LINE.key)), "HOL share"),
                 cell(c.DECODE_RATE, f"{decode:.0f} tok/s" if decode else "-", "decode"))
    return grid


def _wait_p99(state: TuiState, figure: float | None) -> str:
    """The window's decided-wait P99; where only its bounds are known (an engine's coarse
    histogram), the bound its evidence shows, marked as one."""
    return seconds(figure) if figure is not None else evidence_text(state, c.DECIDED_WAIT_P99.signal)


def settings_line(state: TuiState) -> Text:
    engine = state.last.engine if state.last else None
    cfg = engine.engine if engine else EngineInfo()
    chunked = {True: "on", False: "off", None: "?"}[cfg.enable_chunked_prefill]
    return Text(f"chunked prefill {chunked} · budget {_known(cfg.max_num_batched_tokens)} tokens · "
                f"batch {_known(cfg.max_num_seqs)} · policy {cfg.policy or '?'}", style="grey70")


def _known(value) -> str:
    return "?" if value is None else str(value)


def reasons_line(state: TuiState) -> Text:
    w = state.last.window if state.last else None
    by_reason = w.scheduler.wait_seconds_by_reason if w else None
    if w is not None and by_reason is None:
        return Text("waits: not observed by this engine source", style="grey50")
    reasons = {k: v for k, v in (by_reason or {}).items() if v}
    total = sum(reasons.values())
    if not total:
        return Text("waits: none in the window", style="grey50")
    text = Text("waits: ", style="grey70")
    for reason, secs in sorted(reasons.items(), key=lambda kv: -kv[1])[:4]:
        text.append(f"{reason} {secs / total:.0%}  ",
                    style="bold" if stage_of(reason) is not None else "")
    return text


def before_after(state: TuiState) -> CellTable:
    """Before and after the fix; with `whatif`'s prediction for after it, when one was made,
    beside them."""
    fix = state.fix
    predicted = fix.predicted
    columns = [Column("the fix", style="bold cyan"), Column("before", "right")]
    columns += [Column("predicted", "right")] if predicted else []
    table = CellTable([*columns, Column("after", "right"), Column("change", "right")], expand=False)
    for label, key, kind, lower_better in COMPARED:
        b, a = fix.before.get(key), fix.after.get(key)
        change = Text("")
        if kind != "count" and isinstance(b, int | float) and isinstance(a, int | float) and b:
            delta = (a - b) / abs(b)
            better = delta < 0 if lower_better else delta > 0
            change = Text(f"{delta:+.0%}", style="green" if better else "red" if delta else "")
        cells = [_cell(kind, b)] + ([_cell(kind, predicted.get(key))] if predicted else []) + [_cell(kind, a)]
        table.add_row(label, *cells, change)
    table.add_row("verdict", fix.verdict_before, *([""] if predicted else []), state.verdict_text(),
                  "")
    return table


def _cell(kind: str, value) -> str:
    return _fmt(kind, value) if kind != "rate" else rate_tokens(value)


def rate_tokens(value) -> str:
    return "-" if value is None else f"{value:.0f}"


class SchedulerPanel(Panel):
    KEY = "3"
    TITLE = "scheduler"
    STAGE = "scheduler"

    def render_state(self, state: TuiState, app_info: dict):
        last = state.last
        if last is None or last.engine is None:
            return Text("no engine is observed: the scheduler signals need the engine hooks",
                        style="grey50")
        parts = [settings_line(state), figures_grid(state)]
        parts.append(reasons_line(state))
        tail = window_tail(last)
        if tail is not None:
            parts.append(Text(f"tail: {tail.sentence()}", style="bold" if tail.blamed else "grey70"))
        if state.fix is not None:
            parts.append(before_after(state))
        n = 8 if app_info.get("tall") else 4
        parts += [Text("slowest recent requests (prompt→output tokens)", style="bold"),
                  Waterfall(state.slowest(n), rows=n)]
        return Group(*parts)

