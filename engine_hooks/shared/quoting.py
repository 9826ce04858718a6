"""A value as an error message about outside data quotes it: JSON's null, and short (a 10**400
read from a file is not printed whole). The readers of every layer (records, probes' snapshots,
the agent's) word their errors with it."""

from __future__ import annotations


def shown(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 80:
        return f"a {value.bit_length()}-bit number"
    text = "null" if value is None else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
