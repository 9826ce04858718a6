"""Bearer-token guard for the endpoints that change state."""

from __future__ import annotations

import hmac

from fastapi import Header, HTTPException, Request


def require_token(request: Request, authorization: str | None = Header(default=None)) -> None:
    expected = request.app.state.token
    if not expected:
        raise HTTPException(403, "this endpoint changes state and is disabled: start `stagelens serve` with "
                                 "--token or STAGELENS_TOKEN set")
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), expected):
        raise HTTPException(401, "a valid 'Authorization: Bearer <token>' header is required",
                            headers={"WWW-Authenticate": "Bearer"})
