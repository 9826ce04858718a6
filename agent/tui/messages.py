"""Messages from the collection worker to the UI."""

from __future__ import annotations

from textual.message import Message

from stagelens.tui.feed import Poll


class Polled(Message):
    """One poll of the source: new frames and timelines, or why there were none."""

    def __init__(self, poll: Poll) -> None:
        super().__init__()
        self.poll = poll
