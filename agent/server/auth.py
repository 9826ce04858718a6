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
    # Compared as bytes: a header arrives as latin-1, a configured token may be any text (UTF-8 on the wire).
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("latin-1"),
                                                             expected.encode("utf-8")):
        raise HTTPException(401, "a valid 'Authorization: Bearer <token>' header is required",
                            headers={"WWW-Authenticate": "Bearer"})
