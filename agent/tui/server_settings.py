"""The thresholds a running agent judges with, read from its API, so that a TUI watching it
agrees with its alerts (`tui --connect`, a node opened from the fleet)."""

from __future__ import annotations

from stagelens.diagnosis import DiagnosisConfig
from stagelens.diagnosis.config import apply_document
from stagelens.errors import CollectError, UserError
from stagelens.http_client import get_json


def server_settings(url: str) -> tuple[DiagnosisConfig | None, str | None]:
    """The settings the server judges with; `--config` and `--threshold` still apply on top. A
    server that does not say: (None, a notice that this TUI's defaults are used)."""
    served = DiagnosisConfig()
    try:
        apply_document(served, f"{url.rstrip('/')}/api/v1/config",
                       get_json(url, "/api/v1/config", timeout=3.0))
    except (CollectError, UserError) as exc:
        return None, f"judging with this TUI's thresholds: the server's were not read ({exc})"
    return served, None
