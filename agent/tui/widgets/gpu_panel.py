"""Panel 1: GPUs and topology — the per-GPU table with PCIe and NVLink bars against their caps, and
the `nvidia-smi topo -m` matrix; a clear line when the node has no GPU."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from stagelens.diagnosis.config import Threshold
from stagelens.fmt import pct, rate_bytes
from stagelens.frame import busier_direction
from stagelens.probes.gpu import GpuSample
from stagelens.probes.links import PcieSample
from stagelens.probes.sample import NodeSample
from stagelens.probes.topology import Topology
from stagelens.tui.drawing.bars import Bar, LinkStrip
from stagelens.tui.drawing.cell_table import CellTable, Column
from stagelens.tui.state import TuiState
from stagelens.tui.widgets.panel import Panel

# a link this busy has no headroom left for KV or weight transfers
NVLINK_WARN, NVLINK_FIRING = 0.85, 0.95
_CELL_STYLE = {"X": "grey50", "SYS": "red", "NODE": "yellow", "PHB": "yellow"}


def no_gpu_text(node_sample: NodeSample | None) -> Text:
    if node_sample is None:
        return Text("no GPU data: the node was not probed", style="grey50")
    driver = node_sample.driver
    why = driver.message or driver.state or "no device reported"
    return Text(f"no GPU on this node ({why}); the engine's own signals still judge every stage",
                style="yellow")


def nvlink_summary(gpu: GpuSample) -> tuple[str, list[float | None]]:
    """`active/total` and each active link's use of its cap (the busier direction; None: not
    measured yet)."""
    links = gpu.nvlinks
    if not links:
        return "-", []
    active = [lk for lk in links if lk.active]
    return f"{len(active)}/{len(links)}", [busier_direction(lk) for lk in active]


def pcie_link_text(pcie: PcieSample | None) -> str:
    """`G4x16/G4x16`: the negotiated link / the widest it supports; ? where the GPU reported no
    PCIe link."""
    if pcie is None:
        return "G?x?/G?x?"
    return f"G{pcie.gen}x{pcie.width}/G{pcie.gen_max}x{pcie.width_max}"


def gpu_table(gpus: list[GpuSample], topo: Topology | None, wide: bool, pcie_limits: Threshold) -> CellTable:
    """`pcie_limits`: the PCIe backpressure thresholds the diagnosis judges with, for the PCIe
    bars' colours."""
    matrix = topo.matrix if topo is not None else []
    names = topo.gpus if topo is not None else []
    show_matrix = wide and matrix and len(names) == len(gpus)
    columns = [Column("GPU"), Column("util", "right"), Column("mem", "right"), Column("PCIe link"),
               Column("PCIe use", flex=1, min_width=8), Column("", "right"), Column("NVLink"),
               Column("per link", flex=1, min_width=8)]
    if show_matrix:
        columns += [Column(name.replace("GPU", "G"), "center") for name in names]
    table = CellTable(columns)
    for n, g in enumerate(gpus):
        link = pcie_link_text(g.pcie)
        link_style = "bold red" if g.pcie is not None and g.pcie.below_max else ""
        used, total = g.memory_used_bytes, g.memory_total_bytes
        mem = f"{used / 1e9:.0f}/{total / 1e9:.0f}G" if used is not None and total else "-"
        nv_count, nv_ratios = nvlink_summary(g)
        ratio = busier_direction(g.pcie)
        row = [f"GPU{g.index}", pct(g.utilization_gpu_ratio), mem, Text(link, style=link_style),
               Bar(ratio, pcie_limits.warn, pcie_limits.firing, max_width=24), pct(ratio), nv_count,
               LinkStrip(nv_ratios, NVLINK_WARN, NVLINK_FIRING) if nv_ratios else Text("-")]
        if show_matrix:
            row += [Text(cell, style=_CELL_STYLE.get(cell, "green" if cell.startswith("NV") else ""))
                    for cell in matrix[n]]
        table.add_row(*row)
    return table


def matrix_table(topo: Topology) -> CellTable:
    table = CellTable([Column(""), *[Column(name, "center") for name in topo.gpus],
                       Column("NUMA", "right")],
                      expand=False)
    for n, name in enumerate(topo.gpus):
        numa = topo.numa_affinity[n]
        table.add_row(name, *[Text(c,
                                   style=_CELL_STYLE.get(c, "green" if c.startswith("NV") else ""))
                              for c in topo.matrix[n]], "-" if numa is None else str(numa))
    return table


class GpuPanel(Panel):
    KEY = "1"
    TITLE = "GPU & topology"

    def render_state(self, state: TuiState, app_info: dict):
        last = state.last
        node = last.node_sample if last else None
        gpus = last.gpus() if last else []
        if not gpus:
            return no_gpu_text(node)
        topo = node.topology if node is not None else None
        width = self.inner_width
        wide = width >= 70 + 6 * len(gpus)
        parts = [gpu_table(gpus, topo, wide, state.config.threshold("pcie_backpressure"))]
        if not wide and topo is not None and topo.matrix:
            parts += [Text("topology (t: full screen)", style="grey70"), matrix_table(topo)]
        links = [g.pcie for g in gpus if g.pcie is not None]
        tx = sum(p.tx_bytes_per_second or 0 for p in links)
        rx = sum(p.rx_bytes_per_second or 0 for p in links)
        below = [f"GPU{g.index}" for g in gpus if g.pcie is not None and g.pcie.below_max]
        line = Text(f"PCIe total tx {rate_bytes(tx)} rx {rate_bytes(rx)}", style="grey70")
        if below:
            line.append(f"  links below their max gen/width: {', '.join(below)}", style="bold red")
        parts.append(line)
        return Group(*parts)
