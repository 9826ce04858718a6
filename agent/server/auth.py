"""Bearer-token guard for the endpoints that change state."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Header, HTTPException, Request, Response
from fastapi.routing import APIRoute


def require_token(request: Request, authorization: str | None = Header(default=None)) -> None:
    expected = request.app.state.token
    if not expected:
        raise HTTPException(403, "this endpoint changes state and is disabled: start `stagelens "
                                 "serve` with --token or STAGELENS_TOKEN set")
    scheme, _, given = (authorization or "").partition(" ")
    # Compared as bytes: a header arrives as latin-1, a configured token may be any text (UTF-8 on
    # the wire).
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("latin-1"),
                                                             expected.encode("utf-8")):
        raise HTTPException(401, "a valid 'Authorization: Bearer <token>' header is required",
                            headers={"WWW-Authenticate": "Bearer"})


class TokenFirst(APIRoute):
    """A route that asks the token before anything of its request is parsed. FastAPI parses a
    body before it solves the route's dependencies, so `Depends(require_token)` alone answered a
    POST without the token but with a body that is not JSON with 422 and the parser's words: a
    stranger learnt how the body is read."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def token_first(request: Request) -> Response:
            require_token(request, request.headers.get("authorization"))
            return await handler(request)
        return token_first
