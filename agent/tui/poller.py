"""The collection loop, run in a Textual worker thread: poll the source, post the result, wait.

Nothing here touches a widget: results reach the UI as `Polled` messages (the same path tests use).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from stagelens.tui.feed import Feed, Poll
from stagelens.tui.messages import Polled

log = logging.getLogger(__name__)


class Poller:
    def __init__(self, source: Feed, post: Callable[[Polled], object], interval: float = 1.0) -> None:
        self.source, self.post, self.interval = source, post, interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.finished = threading.Event()     # run() has closed the source

    def wake(self) -> None:
        """Poll now (refresh, seek, a fix to apply)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def poll_once(self) -> Poll:
        try:
            result = self.source.poll()
        except Exception as exc:   # a source bug is shown, not raised into the UI
            log.exception("the source failed")
            result = Poll(error=f"{type(exc).__name__}: {exc}")
        self.post(Polled(result))
        return result

    def run(self) -> None:
        try:
            opened = self.source.open()
        except Exception as exc:
            log.exception("the source could not start")
            self.post(Polled(Poll(error=f"could not start: {type(exc).__name__}: {exc}")))
            self.finished.set()
            return
        if opened is not None:
            self.post(Polled(opened))
        try:
            while not self._stop.is_set():
                self.poll_once()
                self._wake.wait(self.interval)
                self._wake.clear()
        finally:
            try:
                self.source.close()
            finally:
                self.finished.set()
