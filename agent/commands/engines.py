"""`stagelens engines [--json] [--pod-resources-socket PATH]`: the vLLM and SGLang servers found on
this node, and how each was found. Exit 0 whatever it finds, nothing included: a node without an
engine is a finding, not a failure."""

from __future__ import annotations

import json

import click

from stagelens.discovery import Discovery, DiscoveryReport
from stagelens.discovery.pod_resources import DEFAULT_SOCKET
from stagelens.printable import printable

COLUMNS = ("name", "kind", "url", "pid", "gpus", "how")


@click.command()
@click.option("--json", "as_json", is_flag=True,
              help='Print {"engines": [...], "pods": [...], "notes": [...], "left_out": N}.')
@click.option("--pod-resources-socket", metavar="PATH", default=DEFAULT_SOCKET, show_default=True,
              help="The kubelet's pod-resources socket (the GPUs each pod holds); absent off "
              "Kubernetes.")
def engines(as_json: bool, pod_resources_socket: str) -> int:
    """List the vLLM and SGLang servers on this node: their URL, process, GPUs, and how each was
    found (its LISTEN socket or its --port)."""
    report = Discovery(pod_resources_socket).refresh()
    click.echo(json.dumps(report.to_dict()) if as_json else render_text(report))
    return 0


def render_text(report: DiscoveryReport) -> str:
    """The engines as a table, then the pods holding devices, then the notes."""
    lines = []
    if report.engines:
        rows = [[e.name, e.kind, e.url, str(e.pid or "-"), _gpus(e.gpus), e.how]
                for e in report.engines]
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS[:-1])]
        for row in [list(COLUMNS), *rows]:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            lines.append(printable("  ".join([*cells, row[-1]])))
    else:
        lines.append(f"no vLLM or SGLang server found among {report.scanned} processes")
    for pod in report.pods:
        held = "; ".join(f"{r}: {', '.join(ids)}" for r, ids in sorted(pod.devices.items()))
        lines.append(printable(f"pod {pod.pod} holds {held}"))
    lines += [printable(f"note: {n}") for n in report.notes]
    return "\n".join(lines)


def _gpus(gpus: list[str] | None) -> str:
    if gpus is None:
        return "-"
    return ",".join(gpus) or "none"
