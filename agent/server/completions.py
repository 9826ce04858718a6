"""An OpenAI-style `/v1/completions` on the hosted lab engine, streaming too, so real HTTP clients and
load generators can drive it. A W3C `traceparent` header becomes the parent of the request's trace.

The bundled models are synthetic: text becomes token ids byte by byte, and ids come back as `" w<id>"`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from engine_hooks.engine import SamplingParams

router = APIRouter(tags=["completions"])


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    prompt: str | list[int] = Field(description="text, or token ids")
    model: str | None = None
    max_tokens: int = Field(default=16, ge=1, le=65536)
    temperature: float = Field(default=0.0, ge=0.0, le=10.0)
    seed: int | None = None
    stream: bool = False


def encode(prompt: str | list[int], vocab: int) -> list[int]:
    if isinstance(prompt, list):
        return prompt
    return [(b + 1) % vocab for b in prompt.encode("utf-8")]


def decode(token_ids: list[int]) -> str:
    return "".join(f" w{t}" for t in token_ids)


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    runtime = request.app.state.runtime
    if runtime.lab is None or runtime.lab.engine is None:
        raise HTTPException(404, "no engine is hosted here: start `stagelens serve --engine lab`")
    engine = runtime.lab.engine
    params = SamplingParams(max_tokens=body.max_tokens, temperature=body.temperature, seed=body.seed)
    request_id = f"cmpl-{uuid.uuid4().hex[:24]}"
    runtime.remember_traceparent(request_id, request.headers.get("traceparent"))
    try:
        req = engine.submit(encode(body.prompt, engine.config.preset.vocab_size), params, model=body.model,
                            request_id=request_id)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    model = req.model
    if body.stream:
        return StreamingResponse(_stream(req, model), media_type="text/event-stream")
    async for _ in _tokens(req):
        pass
    return _body(request_id, model, decode(req.output_token_ids), req.finish_reason,
                 {"prompt_tokens": req.num_prompt_tokens, "completion_tokens": len(req.output_token_ids),
                  "total_tokens": req.num_tokens})


async def _tokens(req, timeout: float = 600.0):
    """The request's tokens as they come, polled: no thread is held per request, so streams scale."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while time.monotonic() < deadline:
        tokens, finished = req.take_available()
        for token in tokens:
            yield token
        if finished:
            return
        pause = 0.001 if tokens else min(pause * 2, 0.01)
        await asyncio.sleep(pause)
    raise HTTPException(504, f"the request did not finish within {timeout:.0f} s")


async def _stream(req, model: str):
    async for token in _tokens(req):
        yield _sse(_body(req.request_id, model, decode([token]), None))
    yield _sse(_body(req.request_id, model, "", req.finish_reason))
    yield "data: [DONE]\n\n"


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def _body(request_id: str, model: str, text: str, finish_reason: str | None, usage: dict | None = None) -> dict:
    out = {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model,
           "choices": [{"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}]}
    if usage is not None:
        out["usage"] = usage
    return out
