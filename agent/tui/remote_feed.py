"""A running `stagelens serve`, polled over its HTTP API. A source that stops answering is reported
in the poll (the TUI shows it STALE) and asked again at the next tick."""

from __future__ import annotations

from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.errors import CollectError
from stagelens.frame import Frame, FrameError
from stagelens.http_client import get_json, redact_url
from stagelens.tui.feed import Feed, Poll

# The first poll may bring the server's whole history: 900 frames of a busy 8-GPU node are ~46 MB
# and ~2.5 million JSON items (~2,800 a frame), past the HTTP client's caps. These hold it, and
# bound the parse (agent.json_answer): ~400 MB at worst (measured, 4 million items of `{"a":{}},`),
# where 60 MiB of `{},` once took it to 1.6 GB and 200 MiB past 3 GB.
FRAMES_MAX_BYTES = 64 * 2**20
FRAMES_MAX_ITEMS = 4_000_000


class RemoteFeed(Feed):
    kind = "remote"

    def __init__(self, url: str, timeout: float = 2.0, slowest: int = 10) -> None:
        super().__init__()
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.slowest = slowest
        self.since: float | None = None

    @property
    def label(self) -> str:
        return redact_url(self.url)

    def poll(self) -> Poll:
        if self.paused:
            return Poll()
        since = 0 if self.since is None else self.since
        try:
            data = get_json(self.url, f"/api/v1/frames?since={since!r}", self.timeout,
                            max_bytes=FRAMES_MAX_BYTES, max_items=FRAMES_MAX_ITEMS)
            if not isinstance(data, list):
                raise CollectError(f"{self.label}/api/v1/frames: the answer is not a list of frames")
            frames = [Frame.from_dict(d) for d in data]
        except (CollectError, FrameError) as exc:
            return Poll(error=str(exc))
        try:
            slowest = get_json(self.url, f"/api/v1/requests/slowest?n={self.slowest}", self.timeout)
        except CollectError:
            slowest = []
        timelines = _timelines(slowest)
        reset = self.since is None
        if frames:
            self.since = frames[-1].time_unix
        return Poll(frames, timelines, reset=reset)


def _timelines(slowest) -> list[RequestTimeline]:
    """The slowest requests the server sent (RequestTimeline.to_dict() each); one that does not
    read as a timeline is left out, as the frames are shown without it."""
    out = []
    for data in slowest if isinstance(slowest, list) else []:
        try:
            out.append(RequestTimeline.from_dict(data))
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return out
