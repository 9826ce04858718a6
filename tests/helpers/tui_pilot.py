"""A TUI driven by a feed the test controls: the feed, frames to inject, the app and its notes."""

from __future__ import annotations

from stagelens.tui.app import StagelensApp
from stagelens.tui.feed import Feed, Poll
from stagelens.tui.messages import Polled
from tests.helpers.frame_builders import engine_snapshot, frame

HOL = dict(scheduler={"decided_wait_p99_s": 0.9, "head_of_line_share": 0.8, "waiting_share": 0.6,
                      "waiting": 7, "running": 3, "wait_seconds_by_reason": {"behind_long_prefill": 4.0}},
           enable_chunked_prefill=False, max_num_batched_tokens=2048)


class FakeFeed(Feed):
    """Counts polls and records fixes; its polls return nothing unless a test queues some."""

    def __init__(self, kind: str = "local", can_fix: bool = True) -> None:
        super().__init__()
        self.kind, self.can_fix = kind, can_fix
        self.polls = 0
        self.fixes: list[dict] = []

    def poll(self) -> Poll:
        self.polls += 1
        return Poll()

    def apply_fix(self, flags: dict) -> None:
        self.fixes.append(flags)


def frames(n: int, start: int = 0, **engine) -> list:
    return [frame(start + i, engine_snapshot(**engine)) for i in range(n)]


async def inject(app, pilot, *polls: Poll) -> None:
    for poll in polls:
        app.post_message(Polled(poll))
    await pilot.pause()


def notes(app) -> str:
    return " | ".join(n.message for n in app._notifications)


def make_app(source=None, **kwargs) -> StagelensApp:
    return StagelensApp(source or FakeFeed(), autopoll=False, **kwargs)
