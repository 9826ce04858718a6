"""Talking to a running `stagelens serve`: plain HTTP GETs with a timeout (standard library only)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from agent.errors import CollectError


def get_json(base_url: str, path: str, timeout: float = 5.0, token: str | None = None):
    url = base_url.rstrip("/") + path
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise CollectError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CollectError(f"{url}: could not collect: {reason}") from None
    except json.JSONDecodeError:
        raise CollectError(f"{url}: the answer is not JSON") from None
