"""Errors as clients expect them: OpenAI's shape under `/v1/` (what OpenAI clients and load
generators parse), FastAPI's `{"detail": ...}` elsewhere. Validation errors never echo a number
JSON cannot carry (NaN, infinity), so a hostile body gets a 4xx that says what is wrong, never a
500."""

from __future__ import annotations

import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

OPENAI_PREFIX = "/v1/"
_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                 404: "not_found_error", 413: "invalid_request_error", 429: "rate_limit_error",
                 503: "service_unavailable", 504: "timeout"}


def error_body(path: str, status: int, message: str, param: str | None = None,
               code: str | None = None, kind: str | None = None) -> dict:
    """`code` is the HTTP status (as vLLM answers) unless a more precise one is given (OpenAI's
    `model_not_found`); `kind` overrides the `type` the status implies."""
    if path.startswith(OPENAI_PREFIX):
        return {"error": {"message": message,
                          "type": kind or _OPENAI_TYPES.get(status, "server_error"), "param": param,
                          "code": status if code is None else code}}
    return {"detail": message}


def error_response(path: str, status: int, message: str, param: str | None = None,
                   headers: dict | None = None, code: str | None = None, kind: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(path, status, message, param, code, kind), status_code=status,
                        headers=headers)


class OpenAIError(Exception):
    """An error a `/v1/` route answers with: status, message, the request field it concerns, and
    optionally OpenAI's `code` and `type` when the status alone does not say it."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind


def model_not_found(model: str, served: list[str]) -> OpenAIError:
    """OpenAI's answer to an unknown model: 404, `invalid_request_error`, code `model_not_found`."""
    return OpenAIError(404, f"the model {model!r} does not exist (served: {', '.join(served)})",
                       "model", code="model_not_found", kind="invalid_request_error")


def install(app: FastAPI) -> None:
    @app.exception_handler(OpenAIError)
    async def _openai(request: Request, exc: OpenAIError):
        return error_response(request.url.path, exc.status, exc.message, exc.param, code=exc.code,
                              kind=exc.kind)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException):
        return error_response(request.url.path, exc.status_code, str(exc.detail),
                              headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        errors = [_json_safe(e) for e in exc.errors()]
        path = request.url.path
        if path.startswith(OPENAI_PREFIX):   # OpenAI answers a malformed body with 400
            first = errors[0] if errors else {}
            where = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
            message = f"{where}: {first.get('msg')}" if where else str(first.get("msg", "invalid request"))
            return error_response(path, 400, message, where)
        return JSONResponse({"detail": errors}, status_code=422)


def _json_safe(value):
    """The validation error without what JSON cannot carry: non-finite numbers become their text."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items() if k != "url"}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)
