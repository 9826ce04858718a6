"""`stagelens probe record`: write this node's NVML answers as a stagelens-nvml/1 snapshot."""

from __future__ import annotations

import click

from stagelens.commands.topo import backend_from_ctx
from stagelens.errors import CollectError, UserError
from stagelens.numbers import Number
from stagelens.probes.errors import NoDriverError
from stagelens.probes.nvml_record import dump_snapshot, record_snapshot


@click.group()
def probe() -> None:
    """Node probes: record what NVML says, to replay it anywhere with --nvml-snapshot."""


@probe.command()
@click.option("--ticks", type=Number(min=1, max=3600, integer=True, unit="samples"), default=5,
              show_default=True,
              help="Samples of the changing values (utilisation, throughput, counters).")
@click.option("--interval", type=Number(min=0, max=3600, unit="s"), default=1.0, show_default=True,
              help="Seconds between samples.")
@click.option("--out", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              show_default=True, help="File to write; - for stdout.")
@click.pass_context
def record(ctx: click.Context, ticks: int, interval: float, out: str) -> None:
    """Record the NVML snapshot of this node (or replay-record the --nvml-snapshot in use)."""
    backend = backend_from_ctx(ctx)
    try:
        text = dump_snapshot(record_snapshot(backend, ticks=ticks, interval_s=interval))
    except NoDriverError as exc:
        raise CollectError(f"{exc}; to look at a recorded node, pass --nvml-snapshot FILE") from exc
    finally:
        backend.close()
    if out == "-":
        click.echo(text, nl=False)
        return
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {out} ({ticks} ticks)", err=True)
