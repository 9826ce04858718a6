"""Notifications (toasts) shown as the plain text they are.

A notice can quote another process: a server whose settings were not read (their signal names), a
node the fleet could not open (its instance label). Textual draws a toast outside the screens'
RenderedLines, reading its text as markup: so every notice is made printable here (agent.printable)
and shown without markup, whoever sent it.
"""

from __future__ import annotations

from textual.notifications import SeverityLevel

from stagelens.printable import printable, printable_lines


class PlainNotices:
    """Put before `App` in an app's bases: its `notify` shows the message printable, as plain
    text (the markup flag is taken for App's signature, and never honoured)."""

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        super().notify(printable_lines(message), title=printable(title), severity=severity,  # type: ignore[misc]
                       timeout=timeout, markup=False)
