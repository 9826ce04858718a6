"""What `/v1/completions` and `/v1/chat/completions` share: finding the hosted engine, submitting
one engine request per choice, following them without a thread per request, and tying them to the
HTTP request.

Every engine request is tied to its HTTP request: a client that disconnects (streaming or not), a
stop sequence that matches, or a handler that ends any other way aborts what is still running, so
its batch slot and KV blocks return to the pool. The engine's deadline (`--request-timeout`) bounds
the rest.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import StreamingResponse

from stagelens.lab.bundled_engine import FinishReason, SamplingParams
from stagelens.server.completion_request import decode
from stagelens.server.errors import OpenAIError, error_body, model_not_found
from stagelens.server.openai_request import SamplingRequest, check_supported, stops_of
from stagelens.server.stops import StopMatcher

DISCONNECT_CHECK_S = 0.1


@dataclass
class Choice:
    index: int
    req: object                     # the bundled engine's Request
    stops: StopMatcher
    finish_reason: str | None = None
    tokens: int = 0
    pending: list[str] = field(default_factory=list)   # text released, not yet sent (streaming)


@dataclass
class Generation:
    """A request's engine requests, submitted: one choice per prompt."""
    engine: object                  # the bundled engine's LLMEngine
    choices: list[Choice]
    request_id: str
    model: str
    include_usage: bool             # a stream ends with a usage chunk


def engine_of(runtime):
    """The hosted engine, serving: else 404 (none hosted) or 503 (down, restarting, stopping)."""
    if runtime.lab is None:
        raise OpenAIError(404, "no engine is hosted here: start `stagelens serve --engine lab`")
    engine = runtime.lab.engine
    if engine is None or not engine.serving:
        reason = engine.failure if engine is not None and engine.failure else "it is restarting or stopping"
        raise OpenAIError(503, f"the lab engine is not serving: {reason}")
    return engine


def check_model(engine, model: str | None) -> None:
    if model is not None and model not in engine.model_names:
        raise model_not_found(model, engine.model_names)


def default_max_tokens(engine, prompts: list[list[int]]) -> int:
    """As vLLM without `max_tokens`: what the context leaves after the longest prompt (at least 1; a
    prompt too long for the context is refused by the engine)."""
    return max(1, engine.config.max_model_len - max(len(p) for p in prompts))


def start(request: Request, body: SamplingRequest, neutral_values: dict[str, tuple],
          prompts_of: Callable[[int], list[list[int]]], max_tokens: int | None, id_prefix: str,
          param: str = "prompt") -> Generation:
    """Checks the body (engine serving: else 404/503; then the 400s) and submits one engine
    request per prompt. `prompts_of` maps the model's vocabulary size to the prompts' token ids;
    `max_tokens` None: what the context leaves."""
    runtime = request.app.state.runtime
    engine = engine_of(runtime)
    check_supported(body, neutral_values)
    check_model(engine, body.model)
    stops = stops_of(body)
    prompts = prompts_of(engine.config.preset.vocab_size)
    params = SamplingParams(max_tokens=max_tokens if max_tokens is not None else default_max_tokens(engine, prompts),
                            temperature=body.temperature or 0.0, seed=body.seed)
    request_id = f"{id_prefix}-{uuid.uuid4().hex[:24]}"
    choices = submit(engine, runtime, params, body.model, prompts, stops, request_id,
                     request.headers.get("traceparent"), param)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return Generation(engine, choices, request_id, choices[0].req.model, include_usage)


def submit(engine, runtime, params, model: str | None, prompts: list[list[int]], stops: list[str],
           request_id: str, traceparent: str | None, param: str = "prompt") -> list[Choice]:
    """One engine request per prompt; all or none are queued. `param` names the request field a
    prompt the engine refuses came from."""
    from stagelens.lab.bundled_engine import EngineStopped

    choices: list[Choice] = []
    try:
        for i, ids in enumerate(prompts):
            rid = request_id if len(prompts) == 1 else f"{request_id}-{i}"
            runtime.remember_traceparent(rid, traceparent)
            req = engine.submit(ids, params, model=model, request_id=rid,
                                timeout_s=runtime.request_timeout)
            choices.append(Choice(i, req, StopMatcher(stops)))
    except ValueError as exc:
        abort_unfinished(engine, choices)
        raise OpenAIError(400, f"{param}: {exc}", param) from None
    except EngineStopped as exc:
        abort_unfinished(engine, choices)
        raise OpenAIError(503, str(exc)) from None
    return choices


async def progress(engine, choices: list[Choice], request: Request):
    """Polls the engine for new tokens (no thread held per request, so streams scale) and yields
    after each round that released text; returns when every choice has ended. A client gone
    aborts all."""
    next_check = time.monotonic() + DISCONNECT_CHECK_S
    pause = 0.001
    while any(c.finish_reason is None for c in choices):
        released = False
        for c in choices:
            if c.finish_reason is None:
                released |= _advance(engine, c)
        if released:
            yield
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + DISCONNECT_CHECK_S
            if await request.is_disconnected():
                abort_unfinished(engine, choices, "the client disconnected")
                return
        pause = 0.001 if released else min(pause * 2, 0.01)
        await asyncio.sleep(pause)


async def run_to_end(engine, choices: list[Choice], request: Request) -> None:
    """A request that is not streamed: wait for every choice; a failure becomes its HTTP error."""
    try:
        async for _ in progress(engine, choices, request):
            pass
    finally:
        abort_unfinished(engine, choices)
    failure = failure_of(engine, choices)
    if failure is not None:
        raise failure


def _advance(engine, c: Choice) -> bool:
    """Take the choice's new tokens; True when it released text or ended."""
    tokens, finished = c.req.take_available()
    released = False
    for token in tokens:      # one piece a token: a stream sends a chunk per token
        c.tokens += 1
        released |= _release(c, c.stops.feed(decode([token])))
        if c.stops.matched:
            engine.abort(c.req.request_id, FinishReason.STOP, None)
            c.finish_reason = FinishReason.STOP
            return True
    if finished:
        _release(c, c.stops.flush())
        c.finish_reason = c.req.finish_reason
        return True
    return released


def _release(c: Choice, text: str) -> bool:
    if text:
        c.pending.append(text)
    return bool(text)


def abort_unfinished(engine, choices: list[Choice],
                     why: str = "the request ended before it finished") -> None:
    for c in choices:
        if not c.req.finished:
            engine.abort(c.req.request_id, FinishReason.ABORT, why)


def failure_of(engine, choices: list[Choice]) -> OpenAIError | None:
    """The HTTP error for the first choice that failed: overdue 504, engine stopped 503, broken
    500."""
    failed = next((c for c in choices if c.finish_reason in FinishReason.FAILED), None)
    if failed is None:
        return None
    reason, error = failed.finish_reason, failed.req.error or failed.finish_reason
    if reason == FinishReason.TIMEOUT:
        return OpenAIError(504, error)
    if reason == FinishReason.ABORT or engine.failure is not None:
        return OpenAIError(503,
                           f"the lab engine stopped before the request finished ({error}); retry")
    return OpenAIError(500, error)


class AbortingStream(StreamingResponse):
    """However the stream ends (done, client gone, cancelled at shutdown), what still runs is
    aborted."""

    def __init__(self, engine, choices: list[Choice], content) -> None:
        super().__init__(content, media_type="text/event-stream")
        self._engine, self._choices = engine, choices

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            abort_unfinished(self._engine, self._choices, "the client disconnected")


Chunk = Callable[[list[tuple[int, str, str | None]], dict | None], dict]


def stream(gen: Generation, request: Request, chunk: Chunk, opening: dict | None = None) -> AbortingStream:
    """The response as server-sent events: `opening` if any, a chunk per released piece of text,
    a final chunk per choice with its finish reason (or an `error` event for a failure), the
    usage chunk when asked, then `[DONE]`. `chunk` builds an event from `(index, text,
    finish_reason)` triples and the usage."""
    return AbortingStream(gen.engine, gen.choices, _events(gen, request, chunk, opening))


async def _events(gen: Generation, request: Request, chunk: Chunk, opening: dict | None) -> AsyncIterator[str]:
    if opening is not None:
        yield sse(opening)
    async for _ in progress(gen.engine, gen.choices, request):
        for c in gen.choices:
            while c.pending:
                yield sse(chunk([(c.index, c.pending.pop(0), None)], None))
    failure = failure_of(gen.engine, gen.choices)
    if failure is not None:
        yield sse(error_body("/v1/", failure.status, failure.message))
    else:
        for c in gen.choices:
            yield sse(chunk([(c.index, "".join(c.pending), c.finish_reason)], None))
        if gen.include_usage:
            yield sse(chunk([], usage_of(gen.choices)))
    yield DONE


def usage_of(choices: list[Choice]) -> dict:
    prompt = sum(c.req.num_prompt_tokens for c in choices)
    completion = sum(c.tokens for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


DONE = "data: [DONE]\n\n"
