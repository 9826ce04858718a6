"""Timelines read back from data this process did not write (a recorded bundle, an agent's HTTP
answer): each `RequestTimeline.to_dict()` is checked field by field before it becomes a
RequestTimeline, so a malformed one is a TimelineError (and left out by `read_timelines`), never a
traceback deep in whoever reads it next. Times are checked as time allows them: within MAX_TIME_S of
zero, nothing ending before it starts, no first token or end before the arrival; token counts are
whole and at most MAX_TOKENS.

Values are kept as they were written (an int time stays an int): readers compute on them exactly
as they did on the dicts."""

from __future__ import annotations

import re

from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.engine_hooks.shared.quoting import shown

# Seconds either side of zero any recorded time lies within: the year 5000 on the Unix clock, and
# far past a monotonic one; a time past it (1e300, 10**400) is no time, and would print a 309-digit
# figure
MAX_TIME_S = 95_617_584_000
# what an outside engine's span may say (agent/sources/otlp/llm_request_spans.py)
MAX_TOKENS = 1 << 40


class TimelineError(ValueError):
    """A timeline dict that does not read as a RequestTimeline."""


def read_timeline(d) -> RequestTimeline:
    """The RequestTimeline `d` (`RequestTimeline.to_dict()`) was written from; TimelineError,
    naming the field, if it is not one."""
    if not isinstance(d, dict):
        raise TimelineError(f"a timeline must be an object, got {shown(d)}")
    _require(d, "request_id", _STRING)
    _require(d, "model", _STRING, nullable=True, optional=True)
    for key in ("prompt_tokens", "output_tokens"):
        _require(d, key, _COUNT)
    _require(d, "preemptions", _COUNT, nullable=True, optional=True)
    _require(d, "arrival", _TIME)
    for key in ("finished", "first_token"):
        _require(d, key, _TIME, nullable=True, optional=True)
        if d.get(key) is not None and d[key] < d["arrival"]:
            raise TimelineError(f"{key}: {shown(d[key])} is before the arrival ({shown(d['arrival'])})")
    _require(d, "finish_reason", _STRING, nullable=True, optional=True)
    _require(d, "trace_id", _TRACE_ID, nullable=True, optional=True)
    for key in ("ttft_components", "latency_components"):
        _require(d, key, _COMPONENTS, nullable=True, optional=True)
    _require_items(d, "events", {"t": _TIME, "event": _STRING})
    _require_items(d, "chunks", {"start": _TIME, "end": _TIME}, {"tokens": _INT, "step": _INT})
    _require_items(d, "waits", {"start": _TIME, "end": _TIME, "reason": _STRING},
                   {"step": _INT_OR_NONE, "held_by": _STRING_OR_NONE})
    # Written by every stagelens; a writer that left them out (the bundle reader lets it): no name,
    # no preemption
    return RequestTimeline.from_dict({**d, "model": d.get("model") or "",
                                      "preemptions": d.get("preemptions") or 0})


def read_timelines(items) -> list[RequestTimeline]:
    """Those of `items` that read as timelines, in their order; the others are left out
    (untrusted data)."""
    out = []
    for d in items if isinstance(items, list) else []:
        try:
            out.append(read_timeline(d))
        except TimelineError:
            continue
    return out


def _require(d: dict, key: str, kind: tuple, nullable: bool = False, optional: bool = False) -> None:
    if key not in d:
        if optional:
            return
        raise TimelineError(f"{key}: missing")
    ok, words = kind
    value = d[key]
    if not (ok(value) or (nullable and value is None)):
        raise TimelineError(f"{key}: must be {words}{' or null' if nullable else ''}, got {shown(value)}")


def _require_items(d: dict, key: str, required: dict, optional: dict | None = None) -> None:
    """`d[key]`: absent, null, or a list of objects with the `required` fields (and the
    `optional` ones typed); a span (`start`, `end`) ends at or after its start."""
    items = d.get(key)
    if items is None:
        return
    if not isinstance(items, list):
        raise TimelineError(f"{key}: must be a list, got {shown(items)}")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise TimelineError(f"{key}[{i}]: must be an object, got {shown(item)}")
        try:
            for name, kind in required.items():
                _require(item, name, kind)
            for name, kind in (optional or {}).items():
                _require(item, name, kind, optional=True)
        except TimelineError as exc:
            raise TimelineError(f"{key}[{i}].{exc}") from None
        if "end" in required and item["end"] < item["start"]:
            raise TimelineError(f"{key}[{i}]: ends ({shown(item['end'])}) before it starts ({shown(item['start'])})")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_time(v) -> bool:
    """A number of seconds within MAX_TIME_S of 0: the comparisons refuse NaN and the infinities
    too, and never overflow (a 400-digit int)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and -MAX_TIME_S <= v <= MAX_TIME_S


_STRING = (lambda v: isinstance(v, str), "a string")
_STRING_OR_NONE = (lambda v: v is None or isinstance(v, str), "a string or null")
_INT = (_is_int, "a whole number")
_INT_OR_NONE = (lambda v: v is None or _is_int(v), "a whole number or null")
_COUNT = (lambda v: _is_int(v) and 0 <= v <= MAX_TOKENS, f"a whole number in [0, 2**{MAX_TOKENS.bit_length() - 1}]")
TIME_WORDS = f"a finite number of seconds within {MAX_TIME_S:.3g} of 0"
_TIME = (is_time, TIME_WORDS)
# A W3C trace id as written: 32 lowercase hex digits (what an exemplar label may carry)
_TRACE_ID = (lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{32}", v) is not None, "32 hex digits")
_COMPONENTS = (lambda v: isinstance(v, dict) and all(isinstance(k, str) and is_time(s) for k, s in v.items()),
               "an object of seconds")
