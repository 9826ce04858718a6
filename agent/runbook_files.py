"""The runbooks: one Markdown file per alert, `runbooks/<AlertName>.md`, read as the `runbooks`
package's data.

The alert rules' `runbook_url`s point at that folder in the repository; the wheel carries the same
files as package data, so `stagelens runbook NAME` and the TUI read them in any install
(importlib.resources). How a runbook is named is written here only: `runbook_ref` and
`stage_runbook` give it, `runbook_stem` reads it back.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePath

from stagelens.errors import UserError
from stagelens.vocabulary import STAGE_ALERTS

PACKAGE = "stagelens.runbooks"     # installed from the runbooks/ folder
FOLDER = "runbooks"
SUFFIX = ".md"


def runbook_file(alert: str) -> str:
    """The file name of an alert's runbook: <alert>.md."""
    return alert + SUFFIX


def runbook_ref(alert: str) -> str:
    """An alert's runbook as the diagnosis, the dashboard and the alert rules name it:
    runbooks/<alert>.md, relative to the repository (and the installed `stagelens.runbooks`
    package's folder)."""
    return f"{FOLDER}/{runbook_file(alert)}"


def stage_runbook(stage: str) -> str:
    """The runbook of a stage: its alert's (agent.vocabulary.STAGE_ALERTS)."""
    return runbook_ref(STAGE_ALERTS[stage])


def runbook_dir() -> Traversable:
    """Where the runbooks are: the `runbooks` package's files."""
    try:
        return resources.files(PACKAGE)
    except ModuleNotFoundError:
        # An editable install made before runbooks/ became a package does not map it: the runbooks
        # are the checkout's folder beside agent/ (`make venv` refreshes the install).
        return Path(__file__).resolve().parents[1] / FOLDER


def runbooks() -> dict[str, Traversable]:
    """Every runbook there is, by name (the alert's)."""
    return {runbook_stem(p.name): p for p in runbook_dir().iterdir() if p.name.endswith(SUFFIX) and p.is_file()}


def find_runbook(name: str) -> Traversable | None:
    """The runbook NAME (or NAME.md, or a path ending in it), or None. Looked up among the
    runbooks there are: the name never becomes a path of its own, so no name (too long, a NUL,
    `..`) reaches the filesystem."""
    return runbooks().get(runbook_stem(name))


def runbook_stem(name: str) -> str:
    """The alert a runbook name, file name or reference (runbooks/<alert>.md) stands for."""
    return PurePath(name).name.removesuffix(SUFFIX)   # a pure path: no system call


def runbook_path(name: str) -> Traversable:
    """The runbook NAME; UserError naming the known ones when there is none."""
    found = find_runbook(name)
    if found is None:
        stem = runbook_stem(name)
        shown = stem if len(stem) <= 60 else stem[:57] + "..."
        raise UserError(f"no runbook named {shown!r} (known: {', '.join(sorted(runbooks())) or 'none'})")
    return found


def read_runbook(name: str) -> str:
    """The runbook NAME's Markdown text; UserError when there is none."""
    return runbook_path(name).read_text(encoding="utf-8")
