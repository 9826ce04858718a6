"""A small file a user names (a config, a token, a model's config.json), read whole but never
past a bound: a path to /dev/zero or a multi-gigabyte file is refused with one line, not read
into memory."""

from __future__ import annotations

from stagelens.errors import UserError


def read_bounded(path, limit: int, cannot_read: str, too_large: str) -> bytes:
    """The file's bytes; UserError `cannot_read` (its `{error}` filled with why) when it cannot
    be opened or read, `too_large` when it holds more than `limit` bytes."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as exc:
        raise UserError(cannot_read.format(error=exc.strerror or exc)) from None
    if len(raw) > limit:
        raise UserError(too_large)
    return raw
