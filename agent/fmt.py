"""Numbers and states as short strings and colours, shared by the TUI's panels and the fleet's
table."""

from __future__ import annotations

import datetime as dt

STATE_STYLE = {"firing": "bold white on red", "warn": "bold black on yellow",
               "ok": "bold black on green", "unknown": "bold white on grey37",
               "info": "bold white on blue"}
STATE_COLOR = {"firing": "red", "warn": "yellow", "ok": "green", "unknown": "grey50", "info": "cyan"}
STATE_MARK = {"firing": "FIRING", "warn": "WARN", "ok": "OK", "unknown": "UNKNOWN", "info": "info"}
# before a value that is a bound (Evidence.bound; None: the value itself)
BOUND_MARK: dict[str | None, str] = {"at_least": "≥ ", "at_most": "≤ "}


def clock(time_unix: float | None) -> str:
    """A frame's wall time as HH:MM:SSZ (UTC, so a screenshot reads the same anywhere)."""
    if time_unix is None:
        return "--:--:--"
    return dt.datetime.fromtimestamp(time_unix, dt.UTC).strftime("%H:%M:%SZ")


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def ratio(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def rate_bytes(value: float | None) -> str:
    """Bytes per second, decimal units like link specs (GB/s)."""
    if value is None:
        return "-"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B/s"


def size(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def evidence_value(value: float | None, unit: str, bound: str | None = None) -> str:
    """An evidence row's value; one that is a bound (Evidence.bound) marked as one ("≥ 300 ms")."""
    if value is None:
        return "n/a"
    if unit == "seconds":
        text = seconds(value)
    elif unit == "share of samples":
        text = pct(value)
    else:
        text = f"{value:.2f}"
    return BOUND_MARK.get(bound, "") + text


def limit(value: float | None, unit: str) -> str:
    return "-" if value is None else evidence_value(value, unit)
