"""Panel 4: the cold path — model loads in progress and in the window, decode step time with and
without a load (the inflation), requests waiting on a model, PCIe and host-to-device throughput
against the caps."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from stagelens.fmt import pct, rate_bytes, seconds, size
from stagelens.frame import busier_direction
from stagelens.probes.links import PcieSample
from stagelens.tui.drawing.bars import Bar
from stagelens.tui.drawing.cell_table import CellTable, Column
from stagelens.tui.state import TuiState
from stagelens.tui.widgets.panel import Panel
from stagelens.tui.widgets.signal_rows import headline, signal_plot


def pcie_rows(state: TuiState) -> CellTable | Text:
    gpus = state.last.gpus() if state.last else []
    if not gpus:
        return Text("PCIe: no GPU on this node — loads are judged by step-time inflation and waiting requests",
                    style="grey50")
    table = CellTable([Column("PCIe"), Column("tx / rx", "right"),
                       Column("of cap", flex=1, min_width=6), Column("", "right")])
    # the diagnosis' own, overrides included
    threshold = state.config.threshold("pcie_backpressure")
    for g in gpus[:8]:
        pcie = g.pcie or PcieSample()     # no PCIe link reported: every figure unknown
        r = busier_direction(pcie)
        table.add_row(f"GPU{g.index}", f"{rate_bytes(pcie.tx_bytes_per_second)} / "
                      f"{rate_bytes(pcie.rx_bytes_per_second)}",
                      Bar(r, threshold.warn, threshold.firing, max_width=30),
                      f"{pct(r)} of {rate_bytes(pcie.bandwidth_bytes_per_second)}")
    return table


def _known(value) -> str:
    return "?" if value is None else str(value)


class ColdPanel(Panel):
    KEY = "4"
    TITLE = "cold path"
    STAGE = "cold_path"

    def render_state(self, state: TuiState, app_info: dict):
        last = state.last
        if last is None:
            return Text("no samples yet", style="grey50")
        parts = []
        if last.engine is not None:
            cfg, cold = last.engine.engine, last.engine.window.cold_path
            resident = "?" if cfg.resident_models is None else ", ".join(cfg.resident_models) or "none"
            parts.append(Text(f"models {_known(cfg.models)} · preloaded "
                              f"{_known(cfg.num_preload_models)} · resident: "
                              f"{resident}", style="grey70"))
            loading = cold.loads_in_progress
            text = Text("loading now: ", style="bold")
            if loading:
                text.append(", ".join(f"{ld.model} ({seconds(ld.seconds)})" for ld in loading),
                            style="bold yellow")
            else:
                text.append("nothing" if loading is not None else "?", style="grey70")
            text.append(f"   in the window: {_known(cold.loads_in_window)} loads, "
                        f"{size(cold.load_bytes_in_window)}, "
                        f"{seconds(cold.load_seconds_in_window)}")
            parts.append(text)
            parts.append(Text(f"decode step {seconds(cold.step_time_during_load_s)} during a load "
                              f"vs {seconds(cold.step_time_without_load_s)} without · waiting on a "
                              f"model: {_known(cold.waiting_on_model)} · host→device "
                              f"{rate_bytes(cold.h2d_bytes_per_s)}"))
            parts.append(headline(state, "step_time_inflation"))
            parts.append(signal_plot(state, "step_time_inflation", lambda w: w.cold_path.step_time_inflation,
                                     3 if app_info.get("tall") else 2))
            parts.append(headline(state, "requests_waiting_on_model"))
        parts.append(pcie_rows(state))
        return Group(*parts)
