"""HOST:PORT as the flags that bind a socket take it (`serve --listen`, `--otlp-receiver`)."""

from __future__ import annotations

from agent.errors import UserError


def parse_listen(text: str, flag: str = "--listen") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UserError(f"{flag}: expected HOST:PORT (e.g. 127.0.0.1:9481), got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)
