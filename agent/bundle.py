"""Bundles: frames and request timelines as JSON lines, written as they come so a crash loses at
most the last second, and read back (with errors that name the file and line) for replay.

    {"format": "stagelens-bundle/1", "created_unix": ..., "source": "..."}
    {"kind": "frame", "frame": {...}}
    {"kind": "timeline", "timeline": {...}}
    {"kind": "engine_config", "engine_config": {...}}        the bundled engine's settings, once
    {"kind": "steps", "steps": [...], "loads": [...]}         its steps and model loads since the last frame

The last two (what `stagelens whatif` fits its step cost on) come only from the bundled engine.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from stagelens.errors import UserError
from stagelens.frame import Frame, FrameError
from stagelens.numbers import shown
from stagelens.recording_checks import LOAD_FIELDS, STEP_FIELDS, engine_config_problem, steps_problem, timeline_problem
from stagelens.replay_limits import MAX_BUNDLE_BYTES, MAX_REPLAY_REQUESTS

BUNDLE_FORMAT = "stagelens-bundle/1"
# a frame is a few KiB: a longer line is not a bundle (`--replay /dev/zero`)
MAX_LINE_BYTES = 64 * 2**20



class BundleWriter:
    """Each frame, with the timelines finished since the last, goes to disk in one write and one
    fsync. The first write that fails (a full disk) ends the bundle: the writer keeps the reason,
    sets `stop` so that the run ends early, takes no more frames, and `close()` raises the reason
    as one line."""

    def __init__(self, fd: int, path: str, stop: threading.Event | None = None) -> None:
        self._fd, self.path, self.stop = fd, path, stop
        self.frames = self.timelines = 0
        self.failed: str | None = None      # why the bundle ends early
        self._fsync = True
        # an engine host whose steps and loads go with each frame
        self._engine = None
        self._steps_since: float | None = None

    @classmethod
    def open(cls, path: str, source: str, stop: threading.Event | None = None) -> BundleWriter:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        except OSError as exc:
            raise UserError(f"{path}: cannot write the bundle: {exc.strerror}") from None
        writer = cls(fd, path, stop)
        writer._write([{"format": BUNDLE_FORMAT, "created_unix": time.time(), "source": source}])
        if writer.failed:
            writer.close()
        return writer

    def follow(self, host, engine_cfg) -> None:
        """Also write the hosted engine's settings now, and its steps and loads with each frame
        (`run_lab`'s `on_start`)."""
        self._write([{"kind": "engine_config", "engine_config": engine_settings(engine_cfg)}])
        self._engine = host

    def _engine_records(self) -> list[dict]:
        host = self._engine
        if host is None:
            return []
        steps = host.recent_steps(since=self._steps_since)
        loads = host.recent_loads(since=self._steps_since)
        if not steps and not loads:
            return []
        self._steps_since = max([s["end"] for s in steps] + [ld["end"] for ld in loads])
        return [{"kind": "steps", **engine_records(steps, loads)}]

    def on_frame(self, frame: Frame, timelines: list) -> None:
        """A sampler listener: one frame (and the timelines finished since the last), on disk on
        return."""
        records = [{"kind": "timeline", "timeline": t.to_dict()} for t in timelines] + self._engine_records()
        if self._write([*records, {"kind": "frame", "frame": frame.to_dict()}]):
            self.timelines += len(timelines)
            self.frames += 1

    def _write(self, records: list[dict]) -> bool:
        if self.failed:
            return False
        data = "".join(json.dumps(r) + "\n" for r in records).encode()
        try:
            view = memoryview(data)
            while view:                     # a short write is not a failure: write the rest
                view = view[os.write(self._fd, view):]
            if self._fsync:
                self._sync()
        except OSError as exc:
            self.failed = f"{self.path}: cannot write the bundle: {exc.strerror} ({self.frames} frames written)"
            if self.stop is not None:
                self.stop.set()
            return False
        return True

    def _sync(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            self._fsync = False         # a pipe or a terminal: nothing to sync, and written already

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
        if self.failed:
            raise UserError(self.failed)


@dataclass
class Bundle:
    path: str
    source: str
    frames: list[Frame] = field(default_factory=list)
    timelines: list[dict] = field(default_factory=list)
    # a last record cut short (a crash while writing): file:line, what was lost
    torn_tail: str | None = None
    # the bundled engine's settings, when it was recorded with them
    engine_config: dict | None = None
    steps: list[dict] = field(default_factory=list)
    loads: list[dict] = field(default_factory=list)


def read_bundle(path: str) -> Bundle:
    """Every whole record of the bundle. A last line cut short is what a crash leaves: it is left
    out, said in `torn_tail` (`read_bundle_warned` prints it); any other line that cannot be read
    is a UserError."""
    bundle, frames = stream_bundle(path)
    bundle.frames.extend(frames)
    return bundle


def stream_bundle(path: str) -> tuple[Bundle, Iterator[Frame]]:
    """The bundle's header read now, and its frames as they are read: a replay holds the frames it
    still needs, not the file. The Bundle fills with the other records (timelines, settings, steps)
    and `torn_tail` as the frames go by, and is whole once they are all read; its `frames` stay
    empty. Errors as `read_bundle`'s."""
    f = _open(path)
    try:
        lines = _lines(f, path)
        number, line, _ = next(lines, (1, b"", True))
        header = _parse(path, number, line)
        if header.get("format") != BUNDLE_FORMAT:
            raise UserError(f"{path}:1: not a stagelens bundle (expected format {BUNDLE_FORMAT!r})")
    except BaseException:
        f.close()
        raise
    bundle = Bundle(path, str(header.get("source", "")))
    return bundle, _frames(bundle, f, lines)


def _open(path: str):
    if os.path.isdir(path):
        raise UserError(f"{path}: is a directory, not a bundle")
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        raise UserError(f"{path}: cannot read the bundle: {exc.strerror}") from None
    size = os.fstat(f.fileno()).st_size
    if size > MAX_BUNDLE_BYTES:
        f.close()
        raise UserError(_too_large(path, f"a bundle of {size / 2**20:,.0f} MiB"))
    return f


def _frames(bundle: Bundle, f, lines) -> Iterator[Frame]:
    """Each frame of the rest of the file, the other records added to `bundle`."""
    path, count = bundle.path, 0
    with f:
        for number, line, whole in lines:
            if not line.strip():
                continue
            try:
                record = _parse(path, number, line)
            except UserError:
                if whole:
                    raise
                bundle.torn_tail = _torn(path, number, line, count)
                return
            if record.get("kind") == "frame":
                count += 1
                yield _frame(path, number, record)
            else:
                _add(bundle, path, number, record)


def _lines(f, path: str):
    """(number, bytes, whole) for each line; `whole` is False for a last line without its
    newline."""
    number = read = 0
    while True:
        try:
            line = f.readline(MAX_LINE_BYTES + 1)
        except OSError as exc:
            raise UserError(f"{path}:{number + 1}: cannot read the bundle: {exc.strerror}") from None
        if not line:
            return
        number += 1
        read += len(line)
        if read > MAX_BUNDLE_BYTES:        # a pipe or a device: its size was not known before
            raise UserError(_too_large(f"{path}:{number}", "the bundle goes on"))
        if len(line) > MAX_LINE_BYTES:
            raise UserError(f"{path}:{number}: line {number} longer than {MAX_LINE_BYTES // 2**20} "
                            f"MiB: not a stagelens bundle")
        whole = line.endswith(b"\n")
        yield number, line, whole


def _frame(path: str, number: int, record: dict) -> Frame:
    try:
        return Frame.from_dict(record.get("frame"))
    except (FrameError, TypeError) as exc:
        raise UserError(f"{path}:{number}: bad frame: {exc}") from None


def _add(bundle: Bundle, path: str, number: int, record: dict) -> None:
    """A record other than a frame."""
    kind = record.get("kind")
    if kind == "timeline":
        problem = timeline_problem(record.get("timeline"))
        if problem:
            raise UserError(f"{path}:{number}: bad timeline: {problem}")
        if len(bundle.timelines) == MAX_REPLAY_REQUESTS:
            raise UserError(f"{path}:{number}: more than {MAX_REPLAY_REQUESTS:,} request "
                            f"timelines, the most a replay takes: record a shorter window")
        bundle.timelines.append(record["timeline"])
    elif kind == "engine_config":
        problem = engine_config_problem(record.get("engine_config"))
        if problem:
            raise UserError(f"{path}:{number}: bad engine_config: {problem}")
        bundle.engine_config = record["engine_config"]
    elif kind == "steps":
        problem = steps_problem(record.get("steps") or [], record.get("loads"))
        if problem:
            raise UserError(f"{path}:{number}: bad steps: {problem}")
        bundle.steps.extend(record.get("steps") or [])
        bundle.loads.extend(record.get("loads") or [])
    else:
        raise UserError(f"{path}:{number}: unknown record kind {shown(kind)} (frame, timeline, "
                        f"engine_config or steps)")


def engine_settings(engine_cfg) -> dict:
    """The bundled engine's settings as a bundle's `engine_config` record (and
    `/api/v1/whatif/window`) holds them."""
    settings = {k: v for k, v in dataclasses.asdict(engine_cfg).items() if k not in ("extra", "model_dir")}
    settings.update(kv_bytes_per_token=engine_cfg.kv_bytes_per_token(),
                    num_blocks=engine_cfg.num_blocks(),
                    resolved_device=engine_cfg.resolved_device(),
                    resolved_dtype=engine_cfg.resolved_dtype())
    return settings


def engine_records(steps: list[dict], loads: list[dict]) -> dict:
    """Steps and loads as a bundle's `steps` record keeps them."""
    return {"steps": [{k: s[k] for k in STEP_FIELDS} for s in steps],
            "loads": [{k: ld[k] for k in LOAD_FIELDS} for ld in loads]}


def _too_large(where: str, what: str) -> str:
    return f"{where}: {what}, past {MAX_BUNDLE_BYTES // 2**20:,} MiB, the most a replay reads: record a shorter window"


def _parse(path: str, number: int, line: bytes) -> dict:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}:{number}: not UTF-8 text (byte 0x{line[exc.start]:02x} at column "
                        f"{exc.start + 1}): not a stagelens bundle") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{number}: not valid JSON: {exc.msg} (column {exc.colno})") from None
    except ValueError:      # a whole number of more digits than Python converts (4,300)
        raise UserError(f"{path}:{number}: not valid JSON for a bundle: a number with thousands of digits") from None
    except RecursionError:
        raise UserError(f"{path}:{number}: not valid JSON: nested too deeply") from None
    if not isinstance(record, dict):
        raise UserError(f"{path}:{number}: each line must be a JSON object")
    return record


def _torn(path: str, number: int, line: bytes, frames: int) -> str:
    what = "a frame" if line.startswith(b'{"kind": "frame"') else \
        "a timeline" if line.startswith(b'{"kind": "timeline"') else "a record"
    return (f"{path}:{number}: the last line is cut short ({len(line)} bytes of {what}), as a "
            f"crash or a full disk while recording leaves it: replaying the {frames} frames before "
            f"it")


def read_bundle_warned(path: str) -> Bundle:
    """`read_bundle` for a command: a torn tail is one warning line on stderr, and the replay
    goes on."""
    bundle = read_bundle(path)
    if bundle.torn_tail:
        print(f"stagelens: warning: {bundle.torn_tail}", file=sys.stderr)
    return bundle
