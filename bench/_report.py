"""What the bench scripts share: how each prints its figures (one JSON object, or aligned `name value` lines), and
a free local port for the servers they start."""

from __future__ import annotations

import json
import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def emit(figures: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(figures, indent=2))
        return
    width = max(len(k) for k in figures) + 2
    for key, value in figures.items():
        print(f"{key:<{width}}{value:.4g}" if isinstance(value, float) else f"{key:<{width}}{value}")
