"""An OpenAI-style `/v1/chat/completions` on the hosted lab engine, streaming too, what most
benchmark clients speak. The chat is rendered by the lab's template (chat_request.py) into one
prompt; from there it is a completion: the same engine requests, tied to the connection the same
way (generation.py)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from stagelens.server.chat_request import CHAT_NEUTRAL, ChatRequest, max_tokens_of, prompt_of
from stagelens.server.generation import Generation, run_to_end, start, stream, usage_of

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
    """OpenAI's chat completion on a lab model (the route's description: CHAT_DESCRIPTION)."""
    gen = start(request, body, CHAT_NEUTRAL, lambda vocab: [prompt_of(body, vocab)], max_tokens_of(body),
                "chatcmpl", param="messages")
    if body.stream:
        return _stream(gen, request)
    await run_to_end(gen.engine, gen.choices, request)
    return JSONResponse({
        "id": gen.request_id, "object": "chat.completion", "created": int(time.time()), "model": gen.model,
        "choices": [{"index": c.index, "message": {"role": "assistant", "content": c.stops.text},
                     "logprobs": None, "finish_reason": c.finish_reason} for c in gen.choices],
        "usage": usage_of(gen.choices)})


def _stream(gen: Generation, request: Request):
    """Opens with a `delta.role` chunk; a piece of text is a `delta.content`, the final chunk's
    delta is empty unless text was held back."""
    created = int(time.time())

    def chunk(deltas: list[tuple[int, dict, str | None]], usage: dict | None = None) -> dict:
        out = {"id": gen.request_id, "object": "chat.completion.chunk", "created": created, "model": gen.model,
               "choices": [{"index": i, "delta": delta, "logprobs": None, "finish_reason": reason}
                           for i, delta, reason in deltas]}
        if gen.include_usage:    # as OpenAI: null on every chunk but the last
            out["usage"] = usage
        return out

    def text_chunk(pieces: list[tuple[int, str, str | None]], usage: dict | None) -> dict:
        return chunk([(i, {"content": text} if text else {}, reason) for i, text, reason in pieces],
                     usage)

    return stream(gen, request, text_chunk, chunk([(c.index, {"role": "assistant", "content": ""},
                                                    None)
                                                   for c in gen.choices]))
