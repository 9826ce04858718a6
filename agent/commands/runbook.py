"""`stagelens runbook NAME`: print one runbook (runbooks/NAME.md)."""

from __future__ import annotations

from pathlib import Path

import click

from agent.errors import UserError

RUNBOOK_DIR = Path(__file__).resolve().parents[2] / "runbooks"


def runbook_path(name: str) -> Path:
    stem = Path(name).name.removesuffix(".md")
    path = RUNBOOK_DIR / f"{stem}.md"
    if not path.is_file():
        known = sorted(p.stem for p in RUNBOOK_DIR.glob("*.md"))
        raise UserError(f"no runbook named {stem!r} (known: {', '.join(known) or 'none'})")
    return path


@click.command()
@click.argument("name")
def runbook(name: str) -> int:
    """Print the runbook NAME (an alert name, e.g. KVCacheStageFiring)."""
    click.echo(runbook_path(name).read_text(encoding="utf-8"))
    return 0
