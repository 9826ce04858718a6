"""The fleet's refresh loop: one query every `interval` seconds on a daemon thread, each answer
handed to whichever fleet screen is attached.

Not a Textual worker: a Textual thread worker runs in the event loop's executor, and `App.run` does
not return until that executor's threads end, so `Enter` or `q` while Prometheus hangs would wait
out the query's timeout. This thread outlives a screen instead: a screen that exits detaches (an
answer still in flight is dropped), and `run_fleet_app` keeps one refresher across every fleet
screen it opens, so two queries never overlap.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from stagelens.fleet.model import FleetView


class Refresher:
    """Runs `query.fetch()`, which never raises (FleetQuery's contract: a failure is the view's
    `error`)."""

    def __init__(self, query, interval: float = 5.0) -> None:
        self.query, self.interval = query, interval
        self._lock = threading.Lock()
        self._post: Callable[[FleetView], object] | None = None
        self._attached = threading.Event()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def attach(self, post: Callable[[FleetView], object]) -> None:
        """Hand every answer to `post` from now on, starting with one fetched now."""
        with self._lock:
            self._post = post
        self._attached.set()
        self._wake.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="stagelens-fleet", daemon=True)
            self._thread.start()

    def detach(self) -> None:
        """No screen to show answers: the loop waits (Prometheus is not asked while a node's own
        TUI is open)."""
        with self._lock:
            self._post = None
        self._attached.clear()

    def wake(self) -> None:
        """Fetch now (`r`)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._attached.set()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._attached.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            view = self.query.fetch()
            with self._lock:
                post = self._post
            if post is not None:
                # the screen's loop closed meanwhile: nobody to show it to
                with contextlib.suppress(RuntimeError):
                    post(view)
            self._wake.wait(self.interval)
            if self._stop.is_set():
                return
