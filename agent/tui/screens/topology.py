"""The topology screen: the `nvidia-smi topo -m` matrix, CPU/NUMA affinity, legend and link
table."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from stagelens.probes.sample import NodeSample
from stagelens.probes.topology import render_topology_text
from stagelens.tui.widgets.lines import RenderedLines


def topology_text(node_sample: NodeSample | None) -> str:
    topo = node_sample.topology if node_sample is not None else None
    if topo is None or not topo.gpus:
        why = (node_sample.driver.message if node_sample is not None else None) or "the node was not probed"
        return f"No GPU topology: {why}\n"
    return render_topology_text(topo.to_dict())


class TopologyScreen(Screen[None]):
    BINDINGS = [Binding("escape,q,t", "app.pop_screen", "back")]

    def __init__(self, node_sample: NodeSample | None) -> None:
        super().__init__()
        self.node_sample = node_sample

    def compose(self) -> ComposeResult:
        yield Static(" topology  ·  esc: back", id="topology-title")
        with VerticalScroll(id="topology-body"):
            # drawn through RenderedLines, which makes every line printable: a topology is a
            # bundle's or a server's
            yield RenderedLines(Text(topology_text(self.node_sample)), id="topology-text")
