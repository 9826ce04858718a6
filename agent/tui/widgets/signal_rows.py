"""A signal as a headline (label, value, state, thresholds) over its history plot."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text

from stagelens.diagnosis.signals import SIGNALS_BY_ID
from stagelens.engine_hooks.records.snapshot import Window
from stagelens.fmt import STATE_COLOR, STATE_MARK, evidence_value, limit
from stagelens.tui.drawing.plot import HistoryPlot
from stagelens.tui.state import TuiState


def _evidence(state: TuiState, signal_id: str):
    d = state.diagnosis
    if d is None:
        return None
    signal = SIGNALS_BY_ID[signal_id]
    return next((e for e in d.stage(signal.stage).evidence if e.signal == signal_id), None)


def evidence_state(state: TuiState, signal_id: str) -> tuple[str, float | None]:
    e = _evidence(state, signal_id)
    return (e.state, e.value) if e else ("unknown", None)


def evidence_text(state: TuiState, signal_id: str) -> str:
    """The signal's value as its evidence shows it, a bound marked as one ("≥ 300 ms"); "-"
    without one."""
    e = _evidence(state, signal_id)
    return "-" if e is None or e.value is None else evidence_value(e.value, e.unit, e.bound)


# an engine read from outside: where the value came from, beside it
_ORIGIN = {"inferred": "inferred", "not observable": "not observable on this engine"}


def headline(state: TuiState, signal_id: str, note: str = "") -> Text:
    signal = SIGNALS_BY_ID[signal_id]
    e = _evidence(state, signal_id)
    st, value = (e.state, e.value) if e else ("unknown", None)
    origin = _ORIGIN.get(e.provenance) if e is not None else None
    if origin:
        note = f"{origin}; {note}" if note else origin
    threshold = state.config.threshold(signal_id)
    text = Text()
    text.append(f"{signal.label} ", style="bold")
    text.append(evidence_value(value, signal.unit, e.bound if e else None),
                style=f"bold {STATE_COLOR[st]}")
    text.append(f" {STATE_MARK[st]}", style=STATE_COLOR[st])
    worse = ">" if signal.direction == "above" else "<"
    if st != "info":      # a signal measured but not judged here has no thresholds to show
        text.append(f"  warn {worse}{limit(threshold.warn, signal.unit)} "
                    f"firing {worse}{limit(threshold.firing, signal.unit)}", style="grey50")
    if note:
        text.append(f"  {note}", style="grey50")
    return text


def signal_plot(state: TuiState, signal_id: str, figure: Callable[[Window], float | None],
                height: int, judged: bool = True, top: float | None = None) -> HistoryPlot:
    """The signal's history: `figure` read from each frame's window, against its thresholds."""
    signal = SIGNALS_BY_ID[signal_id]
    threshold = state.config.threshold(signal_id)
    return HistoryPlot(state.series(figure), threshold.warn if judged else None,
                       threshold.firing if judged else None, signal.direction, height=height,
                       top=top)
