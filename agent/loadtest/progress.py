"""A text progress bar on stderr: redrawn in place on a terminal, one line per point otherwise."""

from __future__ import annotations

import sys
import threading
import time

from stagelens.loadtest.point import Point


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


class ProgressBar:
    def __init__(self, title: str, total: int, stream=None, width: int = 24, enabled: bool = True) -> None:
        self.title, self.total, self.width, self.enabled = title, max(1, total), width, enabled
        self.stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._index, self._label, self._seconds, self._started = 0, "", 1.0, time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def line(self) -> str:
        elapsed = time.monotonic() - self._started
        share = min(1.0, (self._index + min(1.0, elapsed / self._seconds)) / self.total)
        filled = round(share * self.width)
        return (f"{self.title} [{'#' * filled}{'-' * (self.width - filled)}] "
                f"{self._index + 1}/{self.total} {self._label} "
                f"{min(elapsed, self._seconds):4.0f}s/{self._seconds:g}s")

    def start_point(self, index: int, label: str, seconds: float, total: int | None = None) -> None:
        if total is not None:
            self.total = max(1, total)
        self._index, self._label, self._seconds, self._started = index, label, max(seconds, 1e-9), time.monotonic()
        if not self.enabled:
            return
        if self._tty:
            if self._thread is None:
                self._thread = threading.Thread(target=self._redraw,
                                                name="stagelens-bench-progress", daemon=True)
                self._thread.start()
        else:
            self._write(self.line() + "\n")

    def end_point(self, point: Point) -> None:
        if not self.enabled:
            return
        summary = (f"  {self._label}: {point.throughput_tokens_per_s:.0f} tokens/s, P99 "
                   f"{_ms(point.latency_p99_s)}, TTFT P99 {_ms(point.ttft_p99_s)}, "
                   f"{point.requests} requests, stage: {point.stage}")
        self._write(("\r\033[K" if self._tty else "") + summary + "\n")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._write("\r\033[K")

    def _redraw(self) -> None:
        while not self._stop.wait(0.5):
            self._write("\r\033[K" + self.line())

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()
