"""`--engine-url`: attach to an engine serving on its own (vLLM, SGLang) and read it from outside (agent/sources)."""

from __future__ import annotations

from urllib.parse import urlsplit

import click

from agent.errors import UserError

OUTSIDE_ENGINES = ("vllm", "sglang")


def engine_url_option(func):
    return click.option("--engine-url", help="With --engine vllm or sglang: the engine's base URL "
                        "(its /metrics is read each tick), e.g. http://127.0.0.1:8000.")(func)


def open_engine_source(kind: str, url: str | None):
    """The engine source for `--engine KIND --engine-url URL`; None for an engine not read from outside.
    UserError for a URL missing, given without such an engine, or not http(s)://HOST[:PORT]."""
    if kind not in OUTSIDE_ENGINES:
        if url:
            raise UserError(f"--engine-url needs --engine {' or '.join(OUTSIDE_ENGINES)}")
        return None
    if not url:
        raise UserError(f"--engine {kind} needs --engine-url (e.g. http://127.0.0.1:8000)")
    parts = urlsplit(url)
    try:
        parts.port    # noqa: B018  (reading it checks it)
    except ValueError:
        raise UserError(f"--engine-url: bad port in {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--engine-url: expected http(s)://HOST[:PORT], got {url!r}")
    from agent.sources.vllm import VllmSource

    return VllmSource(url, kind=kind)
