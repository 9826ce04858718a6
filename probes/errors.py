"""Errors the probes raise to their caller (the agent turns them into exit statuses)."""

from __future__ import annotations


class ProbeError(Exception):
    """Base of the errors the probes raise on purpose."""


class NoDriverError(ProbeError):
    """NVML cannot be used at all on this node: no library, or the kernel driver is not loaded."""


class SnapshotError(ProbeError, ValueError):
    """A stagelens-nvml/1 snapshot file that cannot be replayed; the message names the file (and
    line)."""

    def __init__(self, path: str, message: str, line: int | None = None) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
