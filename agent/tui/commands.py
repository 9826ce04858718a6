"""Our commands in Textual's command palette (ctrl+p), beside its own."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import SystemCommand

from stagelens.runbook_files import stage_runbook
from stagelens.vocabulary import COLD_PATH, KV_CACHE, SCHEDULER, STAGE_NAMES, STAGES

PANELS = {"1": "GPU & topology", "2": STAGE_NAMES[KV_CACHE], "3": STAGE_NAMES[SCHEDULER],
          "4": STAGE_NAMES[COLD_PATH], "5": "events"}


def stagelens_commands(app) -> Iterable[SystemCommand]:
    for key, name in PANELS.items():
        yield SystemCommand(f"Panel {key}: {name}", f"show or hide the {name} panel (key {key})",
                            lambda key=key: app.action_toggle_panel(key))
    yield SystemCommand("Runbook of the root stage", "open the root stage's runbook (enter)",
                        app.action_runbook)
    for stage in STAGES:
        path = stage_runbook(stage)
        yield SystemCommand(f"Runbook: {STAGE_NAMES[stage]}", path,
                            lambda path=path: app.open_runbook(path), discover=False)
    yield SystemCommand("Topology", "the nvidia-smi topo -m matrix and link table (t)",
                        app.action_topology)
    yield SystemCommand("Pause / resume", "stop or restart collection (space)", app.action_pause)
    yield SystemCommand("Refresh now", "collect at once (r)", app.action_refresh)
    yield SystemCommand("Save SVG screenshot", "for the incident ticket (ctrl+s)",
                        app.action_save_svg)
    if app.source.can_fix:
        yield SystemCommand("Apply the recommended fix",
                            "restart the lab engine with the diagnosis's settings (f)",
                            app.action_apply_fix)
    if app.source.kind == "replay":
        yield SystemCommand("Replay: first frame", "seek to the start (home)", app.action_seek_start)
        yield SystemCommand("Replay: last frame", "seek to the end (end)", app.action_seek_end)
