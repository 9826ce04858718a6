"""The diagnosis's recommendations as engine settings, and those settings as the flags that would
set them."""

from __future__ import annotations

from stagelens.diagnosis.model import Diagnosis
from stagelens.lab.settings import ENGINE_FIELDS, WORKLOAD_FIELDS


def fix_flags(diagnosis: Diagnosis) -> dict:
    """The engine settings the diagnosis recommends, root stage first (its advice wins a
    conflict)."""
    order = sorted(diagnosis.stages, key=lambda s: s.stage != diagnosis.root_stage)
    applied: dict = {}
    for stage in reversed(order):
        if stage.state in ("warn", "firing"):
            for rec in reversed(stage.recommendations):
                applied.update(rec.flags)
    return {k: v for k, v in applied.items() if k in ENGINE_FIELDS or k in WORKLOAD_FIELDS}


def as_flags(applied: dict) -> str:
    parts = []
    for key, value in applied.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif value is False:
            parts.append("--no-" + flag[2:])
        else:
            parts.append(f"{flag} {value}")
    return " ".join(parts) or "(nothing to apply)"
