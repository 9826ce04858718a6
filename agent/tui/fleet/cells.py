"""The fleet screen's content, pure: rows filtered, each cell as coloured text, the header lines
and the selected node's detail. Nothing here touches a widget; every age is counted from the
answer's own time (FleetView.fetched_unix), so a screenshot of the same answer reads the same at
any hour."""

from __future__ import annotations

import re

from rich.text import Text

from stagelens.fleet.model import FleetView, NodeRow, counts
from stagelens.fleet.output import STATUS_MARK, age, health, tail_text
from stagelens.fleet.query import matches
from stagelens.fmt import STATE_COLOR, STATE_MARK, STATE_STYLE, clock, evidence_value
from stagelens.vocabulary import STAGE_NAMES, STAGES

STATUS_STYLE = {**STATE_STYLE, "down": "bold white on red"}
STATUS_COLOR = {**STATE_COLOR, "down": "red"}
STAGE_HEADER = {"kv_cache": "KV cache", "scheduler": "scheduler", "cold_path": "cold path"}
STAGE_HEADER_SHORT = {"kv_cache": "KV", "scheduler": "sched", "cold_path": "cold"}
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


# --- the filter -----------------------------------------------------------------------------------
class FilterError(ValueError):
    pass


def parse_filter(text: str) -> tuple[dict[str, str], list[str]]:
    """`cluster=eu-1 gpu=h100` (spaces or commas between terms) as ({label: value}, words); a
    term without `=` is a word that the node's instance or labels must contain. FilterError for a
    term like `=x` or `a b=c`."""
    labels: dict[str, str] = {}
    words: list[str] = []
    for term in text.replace(",", " ").split():
        label, eq, value = term.partition("=")
        if not eq:
            words.append(term.lower())
        elif not _LABEL.fullmatch(label):
            raise FilterError(f"{term!r}: expected LABEL=VALUE, like cluster=eu-1")
        else:
            labels[label] = value
    return labels, words


def row_matches(row: NodeRow, labels: dict[str, str], words: list[str]) -> bool:
    if not matches(row, labels):
        return False
    name = " ".join([row.instance, *(f"{k}={v}" for k, v in row.labels.items())]).lower()
    return all(word in name for word in words)


# --- table cells ----------------------------------------------------------------------------------
def _cut(text: str, width: int, style: str = "") -> Text:
    """One line, at most `width` cells: a longer one ends with an ellipsis (a table cell never
    wraps)."""
    out = Text(text, style=style, no_wrap=True, overflow="ellipsis", end="")
    out.truncate(width, overflow="ellipsis")
    return out


def verdict_cell(row: NodeRow) -> Text:
    s = row.status
    return Text(f"{STATUS_MARK[s]:<7}", style=STATUS_STYLE[s], no_wrap=True, end="")


def stage_text(row: NodeRow, stage: str, now: float | None) -> tuple[str, str]:
    """(`FIRING 3m`, its state) — the stage's state and for how long it has held it."""
    cell = row.stages.get(stage)
    state = cell.state if cell is not None and cell.state in STATE_MARK else "unknown"
    text = STATE_MARK[state]
    if cell is not None and cell.since_unix is not None and now is not None:
        text += f" {age(now - cell.since_unix)}"
    return text, state


def state_style(state: str) -> str:
    return STATE_COLOR.get(state, "grey50") + (" bold" if state in ("firing", "warn") else "")


def stage_cell(row: NodeRow, stage: str, now: float | None) -> Text:
    # not scraped: no state is known, and the last one exported would read as current
    if not row.up:
        return Text("-", style="grey50", end="")
    text, state = stage_text(row, stage, now)
    return Text(text, style=state_style(state) + (" dim" if row.frame_stale else ""), no_wrap=True,
                end="")


def root_cell(row: NodeRow) -> Text:
    if not row.root_stage:
        return Text("-", style="grey50", end="")
    cell = row.stages.get(row.root_stage)
    state = cell.state if cell is not None else "unknown"
    return Text(STAGE_NAMES.get(row.root_stage, row.root_stage),
                style=f"bold {STATE_COLOR.get(state, 'grey50')}", no_wrap=True, end="")


def evidence_cell(row: NodeRow, width: int, number_first: bool = False) -> Text:
    """The worst signal and its number; the number first where the column is narrow, so that it
    stays."""
    e = row.evidence
    if e is None:
        return Text("-", style="grey50", end="")
    value = evidence_value(e.value, e.unit)
    return _cut(f"{value} {e.signal}" if number_first else f"{e.signal} {value}", width,
                STATE_COLOR.get(e.state, ""))


def health_cell(row: NodeRow, width: int) -> Text:
    """up, DOWN, or what is wrong with the agent, short (the detail pane says it in full)."""
    if not row.up:
        return Text("DOWN", style="bold red", end="")
    parts = []
    if row.frame_stale:
        parts.append(f"frames {age(row.frame_age_s)} old")
    if row.collector_failures:
        n = row.collector_failures
        parts.append(f"{n} failing" if parts else f"{n} collector{'s' if n > 1 else ''} failing")
    return _cut(", ".join(parts), width, "bold yellow") if parts else Text("up", style="green", end="")


def labels_text(row: NodeRow) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(row.labels.items()))


# The columns: (key, header). A narrow screen (the node TUI's 80 columns) keeps the verdict, the
# node, the root and the stages whole and gives the evidence what is left; the tail and the agent's
# health are then in the detail pane under the table (and an unhealthy agent marks its node with ▲).
# A wide one adds the labels, tail, agent.
def columns(wide: bool) -> list[tuple[str, str]]:
    cols = [("verdict", ""), ("node", "node")]
    if wide:
        cols.append(("labels", "labels"))
    headers = STAGE_HEADER if wide else STAGE_HEADER_SHORT
    cols += [("root", "root"), *[(stage, headers.get(stage, stage)) for stage in STAGES],
             ("evidence", "evidence")]
    if wide:
        cols += [("tail", "P99 tail"), ("agent", "agent")]
    return cols


def agent_unhealthy(row: NodeRow) -> bool:
    return row.up and (row.frame_stale or row.collector_failures > 0)


def node_cell(row: NodeRow, wide: bool) -> Text:
    cell = _cut(row.instance, 28 if wide else 22, "bold")
    if not wide and agent_unhealthy(row):
        cell.append(" ▲", style="bold yellow")
    return cell


def row_cells(row: NodeRow, now: float | None, wide: bool) -> list[Text]:
    cells = {"verdict": verdict_cell(row), "node": node_cell(row, wide),
             "labels": _cut(labels_text(row), 20, "grey70"), "root": root_cell(row),
             **{stage: stage_cell(row, stage, now) for stage in STAGES},
             "evidence": evidence_cell(row, 34, number_first=not wide),
             "tail": _cut(tail_text(row), 16), "agent": health_cell(row, 30)}
    return [cells[key] for key, _ in columns(wide)]


def fit(cells: list[list[Text]], headers: list[str], width: int, flex: int, padding: int = 1) -> list[int]:
    """Each column's width: its widest cell, but the `flex` column only what the others leave of
    `width` (at least 8), its cells cut to it with an ellipsis."""
    widths = [max([len(h), *(row[i].cell_len for row in cells)]) for i, h in enumerate(headers)]
    others = sum(w + 2 * padding for i, w in enumerate(widths) if i != flex)
    # 1: the vertical scrollbar, when there is one
    room = max(8, width - others - 2 * padding - 1)
    if widths[flex] > room:
        widths[flex] = room
        for row in cells:
            row[flex].truncate(room, overflow="ellipsis")
    return widths


# --- header lines ---------------------------------------------------------------------------------
def badge(view: FleetView | None) -> tuple[str, str]:
    if view is None:
        return "… STARTING", "bold black on grey70"
    if view.error:
        return "▲ STALE", "bold white on red"
    return "● LIVE", "bold black on green"


def top_line(view: FleetView | None, prometheus: str, interval: float, width: int) -> Text:
    """stagelens fleet │ ● LIVE │ 12:00:00Z │ every 5s │ the Prometheus URL ... ? help; the least
    important pieces dropped first where the width is short."""
    mark, style = badge(view)
    sep = ("│", "grey50")
    pieces = [
        [(" stagelens fleet ", "bold reverse")],
        [(f" {mark} ", style)],
        [sep, (f" {clock(view.fetched_unix if view else None)} ", "")],
        [sep, (f" {prometheus} ", "")],
        [sep, (f" every {interval:g}s ", "grey70")],
    ]
    help_text = " ? help "
    while len(pieces) > 2 and sum(len(t) for p in pieces for t, _ in p) + len(help_text) > width:
        pieces.pop()
    text = Text.assemble(*[piece for p in pieces for piece in p], no_wrap=True, overflow="ellipsis")
    text.append(" " * max(0, width - text.cell_len - len(help_text)))
    text.append(help_text, style="bold reverse")
    return text


def summary_lines(view: FleetView | None, shown: list[NodeRow], filter_text: str,
                  selector: str | None) -> list[Text]:
    """The node counts per state (of the rows shown), the filter, and STALE with the reason when
    the last refresh failed."""
    line = Text(no_wrap=True, overflow="ellipsis")
    if view is None:
        line.append(" asking Prometheus for the fleet…", style="bold")
        return [line]
    total = len(view.rows)
    nodes = f"{len(shown)} of {total} nodes" if filter_text else f"{total} node{'s' if total != 1 else ''}"
    line.append(f" {nodes}", style="bold")
    for s, n in counts(shown).items():
        line.append("  ")
        line.append(f"{n} {STATUS_MARK[s]}", style=f"bold {STATUS_COLOR[s]}" if n else "grey50")
    if filter_text:
        line.append("   filter ", style="grey70")
        line.append(filter_text, style="bold cyan")
    elif not total and view.fetched_unix is not None:
        line.append(f"   no target matches {selector}" if selector else "   no target answered",
                    style="bold yellow")
    lines = [line]
    if view.error:
        why = view.error
        prefix = f"prometheus {view.prometheus}: "       # the top line names the server already
        if view.prometheus and why.startswith(prefix):
            why = why[len(prefix):]
        since = f" — rows as of {clock(view.fetched_unix)}" if view.fetched_unix is not None else ""
        lines.append(Text(f" STALE: {why}{since}", style="bold red", no_wrap=True,
                          overflow="ellipsis"))
    return lines


def detail_lines(row: NodeRow | None, now: float | None, width: int = 80) -> list[Text]:
    """The selected node in full: where to reach it, every stage since when, the evidence, the
    tail, its agent."""
    def line(*parts: tuple[str, str]) -> Text:
        return Text.assemble(*parts, no_wrap=True, overflow="ellipsis")

    if row is None:
        return [line(("no node selected", "grey50"))]
    out = [line((row.instance, "bold"), ("  " + labels_text(row), "grey70"),
                ("  ⏎ " + row.url if row.url else "  no agent URL to open",
                 "cyan" if row.url else "yellow"))]
    stages = None
    for long in (True, False):     # with each state's start time where the width allows
        stages = Text("stages  ", style="grey70", no_wrap=True, overflow="ellipsis")
        for stage in STAGES:
            cell = row.stages.get(stage)
            state = cell.state if cell is not None and cell.state in STATE_MARK else "unknown"
            stages.append(f"{STAGE_NAMES[stage]} ", style="")
            stages.append(STATE_MARK[state], style=state_style(state))
            if cell is not None and cell.since_unix is not None:
                held = f" {age(now - cell.since_unix)}" if now is not None else ""
                stages.append(held + (f" (since {clock(cell.since_unix)})" if long else ""),
                              style="grey70")
            stages.append("   ")
        if not row.up:
            stages.append("(the last states exported; not scraped now)", style="grey50")
        if stages.cell_len <= width:
            break
    out.append(stages)
    e = row.evidence
    out.append(line(("evidence  ", "grey70"),
                    ("-", "grey50") if e is None else
                    (f"{e.signal} {evidence_value(e.value, e.unit)} {STATE_MARK.get(e.state, e.state)}",
                     STATE_COLOR.get(e.state, "")),
                    ("" if e is None else f"  ({STAGE_NAMES.get(e.stage, e.stage)})", "grey70")))
    tail = "  ".join(f"{part} {share:.0%}" for part, share in sorted((row.tail or {}).items(),
                                                                     key=lambda item: -item[1]))
    out.append(line(("P99 TTFT tail  ", "grey70"),
                    (tail or "not exported", "" if tail else "grey50")))
    agent = health(row)
    fresh = row.up and row.frame_age_s is not None and not row.frame_stale
    frame = f"  ·  latest frame {age(row.frame_age_s)} old" if fresh else ""
    out.append(line(("agent  ", "grey70"), (agent, "green" if agent == "up" else "bold red" if not row.up
                                                      else "bold yellow"), (frame, "grey70")))
    return out
