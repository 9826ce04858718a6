"""`GET /v1/models`: the hosted lab engine's models in OpenAI's list shape, with vLLM's
`max_model_len`, so clients that discover the model first (benchmark tools, SDKs) find what to
ask for; and vLLM's `GET /health`, which load generators (guidellm) call before their first
request."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response

from stagelens.server.generation import check_model, engine_of

router = APIRouter(tags=["completions"])


def _card(engine, name: str) -> dict:
    return {"id": name, "object": "model", "created": int(time.time()), "owned_by": "stagelens",
            "root": name, "parent": None, "max_model_len": engine.config.max_model_len}


@router.get("/v1/models")
def list_models(request: Request) -> dict:
    """The lab engine's models (`model-0`, ...), each with `max_model_len` (its context, as vLLM
    adds it). 404 when no engine is hosted, 503 while it is down or restarting."""
    engine = engine_of(request.app.state.runtime)
    return {"object": "list", "data": [_card(engine, name) for name in engine.model_names]}


@router.get("/v1/models/{model}")
def retrieve_model(model: str, request: Request) -> dict:
    """One model of the lab engine; 404 `model_not_found` for a name it does not serve."""
    engine = engine_of(request.app.state.runtime)
    check_model(engine, model)
    return _card(engine, model)


@router.get("/health")
def health(request: Request) -> Response:
    """As vLLM's: 200 with an empty body while the hosted engine serves; 404 when none is hosted,
    503 while it is down or restarting (OpenAI's error shape)."""
    engine_of(request.app.state.runtime)
    return Response(status_code=200)
