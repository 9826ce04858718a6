"""Timelines read back from data this process did not write (a recorded bundle, an agent's HTTP answer): each
`RequestTimeline.to_dict()` is checked field by field before it becomes a RequestTimeline, so a malformed one is
a TimelineError (and left out by `read_timelines`), never a traceback deep in whoever reads it next.

Values are kept as they were written (an int time stays an int): readers compute on them exactly as they did on
the dicts."""

from __future__ import annotations

import math
import re

from engine_hooks.records.timeline import RequestTimeline


class TimelineError(ValueError):
    """A timeline dict that does not read as a RequestTimeline."""


def read_timeline(d) -> RequestTimeline:
    """The RequestTimeline `d` (`RequestTimeline.to_dict()`) was written from; TimelineError if it is not one."""
    if not isinstance(d, dict):
        raise TimelineError(f"a timeline must be an object, got {type(d).__name__}")
    _require(d, "request_id", _is_str)
    _require(d, "model", _is_str, nullable=True, optional=True)
    for key in ("prompt_tokens", "output_tokens"):
        _require(d, key, _is_int)
    _require(d, "preemptions", _is_int, nullable=True, optional=True)
    _require(d, "arrival", _is_time)
    for key in ("finished", "first_token"):
        _require(d, key, _is_time, nullable=True, optional=True)
    _require(d, "finish_reason", _is_str, nullable=True, optional=True)
    _require(d, "trace_id", _is_trace_id, nullable=True, optional=True)
    for key in ("ttft_components", "latency_components"):
        _require(d, key, _is_components, nullable=True, optional=True)
    _require_items(d, "events", {"t": _is_time, "event": _is_str})
    _require_items(d, "chunks", {"start": _is_time, "end": _is_time}, {"tokens": _is_int, "step": _is_int})
    _require_items(d, "waits", {"start": _is_time, "end": _is_time, "reason": _is_str},
                   {"step": _is_int_or_none, "held_by": _is_str_or_none})
    # Written by every stagelens; a writer that left them out (the bundle reader lets it): no name, no preemption
    return RequestTimeline.from_dict({**d, "model": d.get("model") or "", "preemptions": d.get("preemptions") or 0})


def read_timelines(items) -> list[RequestTimeline]:
    """Those of `items` that read as timelines, in their order; the others are left out (untrusted data)."""
    out = []
    for d in items if isinstance(items, list) else []:
        try:
            out.append(read_timeline(d))
        except TimelineError:
            continue
    return out


def _require(d: dict, key: str, ok, nullable: bool = False, optional: bool = False) -> None:
    if key not in d:
        if optional:
            return
        raise TimelineError(f"{key}: missing")
    value = d[key]
    if not (ok(value) or (nullable and value is None)):
        raise TimelineError(f"{key}: unexpected {type(value).__name__} {value!r:.40}")


def _require_items(d: dict, key: str, required: dict, optional: dict | None = None) -> None:
    """`d[key]`: absent, null, or a list of objects with the `required` fields (and the `optional` ones typed)."""
    items = d.get(key)
    if items is None:
        return
    if not isinstance(items, list):
        raise TimelineError(f"{key}: must be a list, got {type(items).__name__}")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise TimelineError(f"{key}[{i}]: must be an object, got {type(item).__name__}")
        for name, ok in required.items():
            _require(item, name, ok)
        for name, ok in (optional or {}).items():
            _require(item, name, ok, optional=True)


def _is_str(v) -> bool:
    return isinstance(v, str)


def _is_trace_id(v) -> bool:
    """A W3C trace id as written: 32 lowercase hex digits (what an exemplar label may carry)."""
    return isinstance(v, str) and re.fullmatch(r"[0-9a-f]{32}", v) is not None


def _is_str_or_none(v) -> bool:
    return v is None or isinstance(v, str)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_int_or_none(v) -> bool:
    return v is None or _is_int(v)


def _is_time(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_components(v) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and _is_time(s) for k, s in v.items())
