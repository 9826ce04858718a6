"""An OpenAI-style `/v1/completions` on the hosted lab engine, streaming too, so real HTTP clients
and load generators can drive it. A W3C `traceparent` header becomes the parent of the request's
trace. How requests are tied to their connection (disconnects, stops, deadlines): generation.py.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from stagelens.server.completion_request import COMPLETION_NEUTRAL, CompletionRequest, prompts_of
from stagelens.server.generation import Generation, run_to_end, start, stream, usage_of

router = APIRouter(tags=["completions"])


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    """OpenAI's text completion on a lab model. `prompt` is text, a list of texts, token ids or a
    list of token-id lists (one choice each, at most 32); text becomes token ids byte by byte
    (UTF-8 byte + 1), and each generated id comes back as the text `" w<id>"`. Honoured: `model`,
    `max_tokens` (16; null: what the context leaves), `temperature` (0, greedy, by default),
    `seed`, `stop` (up to 4), `stream`, `stream_options.include_usage`. `n`, `best_of`,
    `logprobs`, `echo`, `suffix`, `top_p`, the penalties and `logit_bias` only at their neutral
    value (else a 400 that names them). Errors in OpenAI's shape: 400 invalid request, 404
    `model_not_found`, 503 engine down, 504 past `--request-timeout`."""
    gen = start(request, body, COMPLETION_NEUTRAL, lambda vocab: prompts_of(body, vocab), body.max_tokens, "cmpl")
    if body.stream:
        created = int(time.time())    # one for the whole response, as OpenAI's chunks
        return stream(gen, request, lambda pieces, usage: _body(gen, created, pieces, usage))
    await run_to_end(gen.engine, gen.choices, request)
    return JSONResponse(_body(gen, int(time.time()),
                              [(c.index, c.stops.text, c.finish_reason) for c in gen.choices],
                              usage_of(gen.choices)))


def _body(gen: Generation, created: int, choices: list[tuple[int, str, str | None]],
          usage: dict | None = None) -> dict:
    out = {"id": gen.request_id, "object": "text_completion", "created": created, "model": gen.model,
           "choices": [{"index": i, "text": text, "finish_reason": reason, "logprobs": None}
                       for i, text, reason in choices]}
    if usage is not None:
        out["usage"] = usage
    return out
