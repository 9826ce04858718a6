"""Hook failures are isolated: counted, logged once per hook, and never reach the engine."""

from __future__ import annotations

import logging
import threading
from collections import Counter

log = logging.getLogger("stagelens.hooks")


class HookGuard:
    def __init__(self) -> None:
        self.errors: Counter[str] = Counter()
        self._lock = threading.Lock()

    def run(self, hook: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:  # a broken hook must never stop the engine
            with self._lock:
                self.errors[hook] += 1
                first = self.errors[hook] == 1
            if first:
                log.exception("stagelens hook %r failed; the engine goes on, further failures are "
                              "only counted (hook_errors)", hook)
