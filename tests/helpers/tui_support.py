"""What the TUI tests share: the screen as a user reads it."""

from __future__ import annotations

import io

from rich.console import Console


def text_of(app) -> str:
    """The screen as a user reads it."""
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(), record=True,
                      force_terminal=True, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text(styles=False)
