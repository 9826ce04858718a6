"""An OpenAI-style `/v1/chat/completions` on the hosted lab engine, streaming too, what most benchmark
clients speak. The chat is rendered by the lab's template (chat_request.py) into one prompt; from there
it is a completion: the same engine requests, tied to the connection the same way (generation.py)."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from agent.server.chat_request import CHAT_NEUTRAL, ChatRequest, max_tokens_of, prompt_of
from agent.server.completion_request import check_supported, stops_of
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

CHAT_DESCRIPTION = """OpenAI's chat completion on a lab model, streaming or not.

**Chat template.** The lab's models have no tokenizer of text, so the messages are rendered into one
prompt, `<|ROLE|>\\nCONTENT\\n` for each message in order followed by `<|assistant|>\\n`, e.g.
`<|system|>\\nBe brief.\\n<|user|>\\nHi\\n<|assistant|>\\n`, and that text becomes token ids as a
completion prompt does: each UTF-8 byte plus 1 (so `usage.prompt_tokens` is the rendered text's length in
bytes). Content is a string, null, or a list of `{"type": "text"}` parts joined by newlines; `name` and
tool calls are not rendered. Each generated token id comes back as the text `" w<id>"`.

**Honoured:** `model`, `max_completion_tokens` or `max_tokens` (default: what `--max-model-len` leaves),
`temperature` (default 0, greedy), `seed`, `stop` (up to 4), `stream`, `stream_options.include_usage`.
`n` must be 1 (send the request several times for several answers); `logprobs`, `top_p`, the penalties,
`logit_bias`, `tools` and a non-text `response_format` are refused with a 400 unless neutral.

**Stream:** a `chat.completion.chunk` with `delta.role`, one with `delta.content` per token, one with
`finish_reason` (`length` or `stop`), then with `include_usage` one with the usage and no choice, then
`data: [DONE]`. Errors in OpenAI's shape: 400 invalid request, 404 `model_not_found`, 503 engine down,
504 past `--request-timeout` (during a stream: an `error` event)."""


@router.post("/v1/chat/completions", description=CHAT_DESCRIPTION)
async def chat_completions(body: ChatRequest, request: Request):
    """OpenAI's chat completion on a lab model. The chat template: `<|ROLE|>\\nCONTENT\\n` per message, then
    `<|assistant|>\\n`, the text encoded as UTF-8 bytes + 1 (the rest: CHAT_DESCRIPTION, chat_request.py)."""
    runtime = request.app.state.runtime
    engine = engine_of(runtime)
    check_supported(body, CHAT_NEUTRAL)
    check_model(engine, body.model)
    stops = stops_of(body)
    prompts = [prompt_of(body, engine.config.preset.vocab_size)]
    from engine_hooks.engine import SamplingParams

    max_tokens = max_tokens_of(body)
    params = SamplingParams(max_tokens=max_tokens if max_tokens is not None else default_max_tokens(engine, prompts),
                            temperature=body.temperature or 0.0, seed=body.seed)
    request_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    choices = submit(engine, runtime, params, body.model, prompts, stops, request_id,
                     request.headers.get("traceparent"), param="messages")
    model = choices[0].req.model
    if body.stream:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return AbortingStream(engine, choices, _stream(engine, choices, request, request_id, model, usage))
    await run_to_end(engine, choices, request)
    return JSONResponse({
        "id": request_id, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": c.index, "message": {"role": "assistant", "content": c.stops.text},
                     "logprobs": None, "finish_reason": c.finish_reason} for c in choices],
        "usage": usage_of(choices)})


async def _stream(engine, choices: list[Choice], request: Request, request_id: str, model: str, include_usage: bool):
    created = int(time.time())

    def chunk(deltas: list[tuple[int, dict, str | None]], usage: dict | None = None) -> str:
        out = {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model,
               "choices": [{"index": i, "delta": delta, "logprobs": None, "finish_reason": reason}
                           for i, delta, reason in deltas]}
        if include_usage:    # as OpenAI: null on every chunk but the last
            out["usage"] = usage
        return sse(out)

    yield chunk([(c.index, {"role": "assistant", "content": ""}, None) for c in choices])
    async for _ in progress(engine, choices, request):
        for c in choices:
            while c.pending:
                yield chunk([(c.index, {"content": c.pending.pop(0)}, None)])
    failure = failure_of(engine, choices)
    if failure is not None:
        yield sse(error_body("/v1/", failure.status, failure.message))
    else:
        for c in choices:
            rest = "".join(c.pending)
            yield chunk([(c.index, {"content": rest} if rest else {}, c.finish_reason)])
        if include_usage:
            yield chunk([], usage_of(choices))
    yield DONE
