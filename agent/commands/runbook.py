"""`stagelens runbook NAME`: print one runbook (runbooks/NAME.md)."""

from __future__ import annotations

from pathlib import Path

import click

from agent.errors import UserError

RUNBOOK_DIR = Path(__file__).resolve().parents[2] / "runbooks"


def runbook_path(name: str) -> Path:
    """The runbook NAME (or NAME.md, or a path ending in it), looked up among the runbooks there are:
    the name never becomes a path of its own, so no name (too long, a NUL, `..`) reaches the filesystem."""
    runbooks = {p.stem: p for p in RUNBOOK_DIR.glob("*.md")}
    stem = Path(name).name.removesuffix(".md")   # a pure path: no system call
    if stem not in runbooks:
        shown = stem if len(stem) <= 60 else stem[:57] + "..."
        raise UserError(f"no runbook named {shown!r} (known: {', '.join(sorted(runbooks)) or 'none'})")
    return runbooks[stem]


@click.command()
@click.argument("name")
def runbook(name: str) -> int:
    """Print the runbook NAME (an alert name, e.g. KVCacheStageFiring)."""
    click.echo(runbook_path(name).read_text(encoding="utf-8"))
    return 0
