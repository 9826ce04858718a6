"""`stagelens topo [--json]`: the `nvidia-smi topo -m` matrix, CPU/NUMA affinity and the link
table."""

from __future__ import annotations

import json

import click

from stagelens.errors import CollectError, UserError

# Submodule imports, not `from probes import ...`: an editable install made before
# probes/__init__.py existed maps probes as a namespace package, and the console script would then
# miss the re-exports.
from stagelens.probes.errors import NoDriverError, SnapshotError
from stagelens.probes.nvml_backend import NvmlBackend
from stagelens.probes.sample import open_backend
from stagelens.probes.topology import render_topology_text, topology_json


def backend_from_ctx(ctx: click.Context) -> NvmlBackend:
    """The backend the global --nvml-snapshot option asks for: a snapshot file, else the driver."""
    path = (ctx.obj or {}).get("nvml_snapshot")
    try:
        return open_backend(path)
    except SnapshotError as exc:
        raise UserError(str(exc)) from exc


@click.command()
@click.option("--json", "as_json", is_flag=True,
              help="Print it as JSON: gpus, matrix, affinity, links.")
@click.pass_context
def topo(ctx: click.Context, as_json: bool) -> None:
    """GPU interconnect matrix like `nvidia-smi topo -m`, with CPU/NUMA affinity and PCIe/NVLink
    links."""
    backend = backend_from_ctx(ctx)
    try:
        data = topology_json(backend)
    except NoDriverError as exc:
        raise CollectError(f"{exc}; to look at a recorded node, pass --nvml-snapshot FILE") from exc
    finally:
        backend.close()
    click.echo(json.dumps(data) if as_json else render_topology_text(data), nl=as_json)
