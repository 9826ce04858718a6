"""The fleet view as plain text (one line a node) and as a JSON document.

The JSON document (`stagelens fleet --json`) is stable: fields are added, never renamed.

    {"prometheus": "http://prometheus:9090",      the server asked
     "fetched": "2025-01-01T12:00:00+00:00",       when it last answered (RFC 3339), null: never
     "error": null,                                why this refresh has no answer (the nodes are then the last ones)
     "total": 3,                                   nodes matching the selector and filters
     "more": 0,                                    of them, how many the limit left out (the least severe)
     "nodes": [                                    most severe first: down, firing, warn, ok, unknown; then instance
       {"instance": "10.0.0.7:9400",               Prometheus's instance label
        "labels": {"cluster": "eu-1"},             the target's other labels
        "up": true,                                the last scrape succeeded
        "verdict": "firing",                       the worst stage state (unknown when down)
        "root_stage": "kv_cache",                  the stage the agent names as the root, or null
        "stages": {"kv_cache": {"state": "firing", "since": "2025-01-01T11:57:00+00:00"}, ...},   every stage
        "evidence": {"stage": "kv_cache", "signal": "kv_fragmentation_ratio", "state": "firing",
                     "value": 0.91, "unit": "ratio"},       the worst signal; null when none warns or fires
        "tail": {"kv_cache": 0.7, "scheduler": 0.1, "cold_path": 0.0, "queued": 0.0, "compute": 0.2},   P99 TTFT
                                                   shares (queued: no reason published), or null
        "frame_age_s": 1.2,                        seconds since the agent's latest frame, or null
        "frame_stale": false,                      that age is past agent.fleet.model.FRAME_STALE_S
        "collector_failures": 0,                   collectors failing in the latest frame
        "url": "http://10.0.0.7:9400"}]}           the agent's base URL (for `stagelens tui --connect`)
"""

from __future__ import annotations

import datetime as dt

from stagelens.fleet.model import FleetView, NodeRow, counts
from stagelens.fmt import STATE_MARK, evidence_value
from stagelens.vocabulary import STAGES

DEFAULT_LIMIT = 500
# a node's status (NodeRow.status) as the table shows it
STATUS_MARK = {**STATE_MARK, "down": "DOWN"}


def rfc3339(time_unix: float | None) -> str | None:
    if time_unix is None:
        return None
    return dt.datetime.fromtimestamp(time_unix, dt.UTC).isoformat(timespec="seconds")


def age(seconds: float | None) -> str:
    """A duration as its largest unit: 45s, 3m, 2h, 5d ("-" when not known)."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def node_document(row: NodeRow) -> dict:
    evidence = row.evidence
    return {
        "instance": row.instance,
        "labels": dict(sorted(row.labels.items())),
        "up": row.up,
        "verdict": row.verdict,
        "root_stage": row.root_stage,
        "stages": {stage: {"state": cell.state, "since": rfc3339(cell.since_unix)}
                   for stage in STAGES if (cell := row.stages.get(stage)) is not None},
        "evidence": None if evidence is None else {"stage": evidence.stage,
                                                   "signal": evidence.signal,
                                                   "state": evidence.state, "value": evidence.value,
                                                   "unit": evidence.unit},
        "tail": None if row.tail is None else dict(row.tail),
        "frame_age_s": None if row.frame_age_s is None else round(row.frame_age_s, 3),
        "frame_stale": row.frame_stale,
        "collector_failures": row.collector_failures,
        "url": row.url,
    }


def fleet_document(view: FleetView, limit: int = DEFAULT_LIMIT) -> dict:
    shown = view.rows[:limit]
    return {"prometheus": view.prometheus, "fetched": rfc3339(view.fetched_unix),
            "error": view.error, "total": len(view.rows), "more": len(view.rows) - len(shown),
            "nodes": [node_document(row) for row in shown]}


def health(row: NodeRow) -> str:
    if not row.up:
        return "DOWN"
    parts = []
    if row.frame_stale:
        parts.append(f"frames stale {age(row.frame_age_s)}")
    if row.collector_failures:
        parts.append(f"{row.collector_failures} collector{'s' if row.collector_failures > 1 else ''} failing")
    return ", ".join(parts) or "up"


def evidence_text(row: NodeRow) -> str:
    e = row.evidence
    if e is None:
        return "-"
    return f"{e.signal} {evidence_value(e.value, e.unit)} {e.state}"


def tail_text(row: NodeRow) -> str:
    """The stage taking most of the P99 TTFT tail, with its share; "-" where the agent exports
    none."""
    if not row.tail:
        return "-"
    part, share = max(row.tail.items(), key=lambda item: (item[1], item[0] in STAGES))
    return f"{part} {share:.0%}"


def node_name(row: NodeRow) -> str:
    """The instance, with the target's labels in braces where it has any."""
    labels = ",".join(f"{k}={v}" for k, v in sorted(row.labels.items()))
    return f"{row.instance}{{{labels}}}" if labels else row.instance


def node_line(row: NodeRow, now: float | None, width: int = 0) -> str:
    """verdict, instance{labels}, root stage, each stage's state and for how long, the worst
    evidence, the tail's main part, the agent's health."""
    verdict = STATUS_MARK[row.status]
    name = node_name(row)
    stages = "  ".join(
        f"{stage} {cell.state}"
        + (f" {age(now - cell.since_unix)}" if row.up and now is not None and cell.since_unix is not None else "")
        for stage in STAGES if (cell := row.stages.get(stage)) is not None)
    return (f"{verdict:<7} {name:<{width}}  root {row.root_stage or '-':<9}  {stages}  |  {evidence_text(row)}"
            f"  |  tail {tail_text(row)}  |  {health(row)}")


def summary_line(view: FleetView) -> str:
    at = rfc3339(view.fetched_unix) or "never"
    return (f"{len(view.rows)} node{'s' if len(view.rows) != 1 else ''} from {view.prometheus} at {at}: "
            + ", ".join(f"{n} {status}" for status, n in counts(view.rows).items()))


def render_fleet(view: FleetView, limit: int = DEFAULT_LIMIT) -> str:
    """A summary line, STALE with the reason when the last refresh failed, then one line a node
    (at most `limit`, the most severe) and how many more there are."""
    lines = []
    if view.error:
        lines.append(f"STALE: {view.error}")
    lines.append(summary_line(view))
    shown = view.rows[:limit]
    now = view.fetched_unix
    width = max((len(node_name(row)) for row in shown), default=0)
    lines += [node_line(row, now, width) for row in shown]
    if len(view.rows) > len(shown):
        lines.append(f"... and {len(view.rows) - len(shown)} more, less severe (--limit {limit})")
    return "\n".join(lines)
