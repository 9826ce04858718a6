"""An OpenAI-style `/v1/completions` on the hosted lab engine, streaming too, so real HTTP clients and
load generators can drive it. A W3C `traceparent` header becomes the parent of the request's trace.
How requests are tied to their connection (disconnects, stops, deadlines): generation.py.
"""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from agent.server.completion_request import (
    COMPLETION_NEUTRAL,
    CompletionRequest,
    check_supported,
    prompts_of,
    stops_of,
)
from agent.server.errors import error_body
from agent.server.generation import (
    DONE,
    AbortingStream,
    Choice,
    check_model,
    default_max_tokens,
    engine_of,
    failure_of,
    progress,
    run_to_end,
    sse,
    submit,
    usage_of,
)

router = APIRouter(tags=["completions"])


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    """OpenAI's text completion on a lab model. `prompt` is text, a list of texts, token ids or a list of
    token-id lists (one choice each, at most 32); text becomes token ids byte by byte (UTF-8 byte + 1),
    and each generated id comes back as the text `" w<id>"`. Honoured: `model`, `max_tokens` (16; null:
    what the context leaves), `temperature` (0, greedy, by default), `seed`, `stop` (up to 4), `stream`,
    `stream_options.include_usage`. `n`, `best_of`, `logprobs`, `echo`, `suffix`, `top_p`, the penalties
    and `logit_bias` only at their neutral value (else a 400 that names them). Errors in OpenAI's shape:
    400 invalid request, 404 `model_not_found`, 503 engine down, 504 past `--request-timeout`."""
    runtime = request.app.state.runtime
    engine = engine_of(runtime)
    check_supported(body, COMPLETION_NEUTRAL)
    check_model(engine, body.model)
    prompts, stops = prompts_of(body, engine.config.preset.vocab_size), stops_of(body)
    from engine_hooks.engine import SamplingParams

    max_tokens = body.max_tokens if body.max_tokens is not None else default_max_tokens(engine, prompts)
    params = SamplingParams(max_tokens=max_tokens, temperature=body.temperature or 0.0, seed=body.seed)
    request_id = f"cmpl-{uuid.uuid4().hex[:24]}"
    choices = submit(engine, runtime, params, body.model, prompts, stops, request_id,
                     request.headers.get("traceparent"))
    model = choices[0].req.model
    if body.stream:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return AbortingStream(engine, choices, _stream(engine, choices, request, request_id, model, usage))
    await run_to_end(engine, choices, request)
    return JSONResponse(_body(request_id, model, [(c.index, c.stops.text, c.finish_reason) for c in choices],
                              usage_of(choices)))


async def _stream(engine, choices: list[Choice], request: Request, request_id: str, model: str, include_usage: bool):
    async for _ in progress(engine, choices, request):
        for c in choices:
            while c.pending:
                yield sse(_body(request_id, model, [(c.index, c.pending.pop(0), None)]))
    failure = failure_of(engine, choices)
    if failure is not None:
        yield sse(error_body("/v1/", failure.status, failure.message))
    else:
        for c in choices:
            yield sse(_body(request_id, model, [(c.index, "".join(c.pending), c.finish_reason)]))
        if include_usage:
            yield sse(_body(request_id, model, [], usage_of(choices)))
    yield DONE


def _body(request_id: str, model: str, choices: list[tuple[int, str, str | None]], usage: dict | None = None) -> dict:
    out = {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model,
           "choices": [{"index": i, "text": text, "finish_reason": reason, "logprobs": None}
                       for i, text, reason in choices]}
    if usage is not None:
        out["usage"] = usage
    return out
