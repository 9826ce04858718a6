"""`stagelens runbook NAME`: print one runbook (runbooks/NAME.md, the `runbooks` package's data)."""

from __future__ import annotations

import click

from stagelens.runbook_files import read_runbook, runbook_dir, runbook_path

__all__ = ["RUNBOOK_DIR", "runbook", "runbook_path"]

RUNBOOK_DIR = runbook_dir()


@click.command()
@click.argument("name")
def runbook(name: str) -> int:
    """Print the runbook NAME (an alert name, e.g. KVCacheStageFiring)."""
    click.echo(read_runbook(name))
    return 0
