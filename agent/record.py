"""Bundles: frames and request timelines as JSON lines, written as they come so a crash loses at
most the last second, and read back (with errors that name the file and line) for replay.

    {"format": "stagelens-bundle/1", "created_unix": ..., "source": "..."}
    {"kind": "frame", "frame": {...}}
    {"kind": "timeline", "timeline": {...}}
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field

from agent.errors import UserError
from agent.frame import Frame, FrameError

BUNDLE_FORMAT = "stagelens-bundle/1"


class BundleWriter:
    def __init__(self, f, path: str) -> None:
        self._f, self.path = f, path
        self.frames = self.timelines = 0

    @classmethod
    def open(cls, path: str, source: str) -> BundleWriter:
        try:
            f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise UserError(f"{path}: cannot write the bundle: {exc.strerror}") from None
        writer = cls(f, path)
        writer._write({"format": BUNDLE_FORMAT, "created_unix": time.time(), "source": source})
        return writer

    def on_frame(self, frame: Frame, timelines: list) -> None:
        """A sampler listener: one frame (and the timelines finished since the last), flushed to disk."""
        for t in timelines:
            self._f.write(json.dumps({"kind": "timeline", "timeline": t.to_dict()}) + "\n")
            self.timelines += 1
        self._write({"kind": "frame", "frame": frame.to_dict()})
        self.frames += 1

    def _write(self, record: dict) -> None:
        self._f.write(json.dumps(record) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


@dataclass
class Bundle:
    path: str
    source: str
    frames: list[Frame] = field(default_factory=list)
    timelines: list[dict] = field(default_factory=list)


def read_bundle(path: str) -> Bundle:
    try:
        f = open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise UserError(f"{path}: cannot read the bundle: {exc.strerror}") from None
    with f:
        lines = iter(enumerate(f, start=1))
        header = _parse(path, next(lines, (1, "")))
        if header.get("format") != BUNDLE_FORMAT:
            raise UserError(f"{path}:1: not a stagelens bundle (expected format {BUNDLE_FORMAT!r})")
        bundle = Bundle(path, str(header.get("source", "")))
        for number, line in lines:
            if not line.strip():
                continue
            record = _parse(path, (number, line))
            kind = record.get("kind")
            if kind == "frame":
                try:
                    bundle.frames.append(Frame.from_dict(record.get("frame")))
                except (FrameError, TypeError) as exc:
                    raise UserError(f"{path}:{number}: bad frame: {exc}") from None
            elif kind == "timeline":
                if not isinstance(record.get("timeline"), dict):
                    raise UserError(f"{path}:{number}: a timeline record needs a 'timeline' object")
                bundle.timelines.append(record["timeline"])
            else:
                raise UserError(f"{path}:{number}: unknown record kind {kind!r} (frame or timeline)")
    return bundle


def _parse(path: str, numbered: tuple[int, str]) -> dict:
    number, line = numbered
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{number}: not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(record, dict):
        raise UserError(f"{path}:{number}: each line must be a JSON object")
    return record
