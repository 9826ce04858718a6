"""An OpenAI-style `/v1/completions` on the hosted lab engine, streaming too, so real HTTP clients and
load generators can drive it. A W3C `traceparent` header becomes the parent of the request's trace.

Every engine request is tied to its HTTP request: a client that disconnects (streaming or not), a
stop sequence that matches, or a handler that ends any other way aborts what is still running, so its
batch slot and KV blocks return to the pool. The engine's deadline (`--request-timeout`) bounds the rest.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from agent.server.completion_request import CompletionRequest, check_supported, decode, prompts_of, stops_of
from agent.server.errors import OpenAIError, error_body
from agent.server.stops import StopMatcher
from engine_hooks.engine.request import FinishReason

router = APIRouter(tags=["completions"])
DISCONNECT_CHECK_S = 0.1


@dataclass
class Choice:
    index: int
    req: object                     # engine_hooks.engine.Request
    stops: StopMatcher
    finish_reason: str | None = None
    tokens: int = 0
    pending: list[str] = field(default_factory=list)   # text released, not yet sent (streaming)


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    runtime = request.app.state.runtime
    engine = _engine(runtime)
    check_supported(body)
    if body.model is not None and body.model not in engine.model_names:
        raise OpenAIError(404, f"the model {body.model!r} does not exist (served: {', '.join(engine.model_names)})",
                          "model")
    prompts, stops = prompts_of(body, engine.config.preset.vocab_size), stops_of(body)
    request_id = f"cmpl-{uuid.uuid4().hex[:24]}"
    choices = _submit(engine, runtime, body, prompts, stops, request_id, request.headers.get("traceparent"))
    model = choices[0].req.model
    if body.stream:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return _AbortingStream(engine, choices, _stream(engine, choices, request, request_id, model, usage),
                               media_type="text/event-stream")
    try:
        async for _ in _progress(engine, choices, request):
            pass
    finally:
        _abort_unfinished(engine, choices)
    failure = _failure(engine, choices)
    if failure is not None:
        raise failure
    return JSONResponse(_body(request_id, model, [(c.index, c.stops.text, c.finish_reason) for c in choices],
                              _usage(choices)))


def _engine(runtime):
    if runtime.lab is None:
        raise OpenAIError(404, "no engine is hosted here: start `stagelens serve --engine lab`")
    engine = runtime.lab.engine
    if engine is None or not engine.serving:
        reason = engine.failure if engine is not None and engine.failure else "it is restarting or stopping"
        raise OpenAIError(503, f"the lab engine is not serving: {reason}")
    return engine


def _submit(engine, runtime, body, prompts, stops, request_id, traceparent) -> list[Choice]:
    from engine_hooks.engine import EngineStopped, SamplingParams

    params = SamplingParams(max_tokens=body.max_tokens, temperature=body.temperature, seed=body.seed)
    choices: list[Choice] = []
    try:
        for i, ids in enumerate(prompts):
            rid = request_id if len(prompts) == 1 else f"{request_id}-{i}"
            runtime.remember_traceparent(rid, traceparent)
            req = engine.submit(ids, params, model=body.model, request_id=rid, timeout_s=runtime.request_timeout)
            choices.append(Choice(i, req, StopMatcher(stops)))
    except ValueError as exc:
        _abort_unfinished(engine, choices)
        raise OpenAIError(400, f"prompt: {exc}", "prompt") from None
    except EngineStopped as exc:
        _abort_unfinished(engine, choices)
        raise OpenAIError(503, str(exc)) from None
    return choices


async def _progress(engine, choices: list[Choice], request: Request):
    """Polls the engine for new tokens (no thread held per request, so streams scale) and yields after
    each round that released text; returns when every choice has ended. A client gone aborts all."""
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
                _abort_unfinished(engine, choices, "the client disconnected")
                return
        pause = 0.001 if released else min(pause * 2, 0.01)
        await asyncio.sleep(pause)


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


def _abort_unfinished(engine, choices: list[Choice], why: str = "the request ended before it finished") -> None:
    for c in choices:
        if not c.req.finished:
            engine.abort(c.req.request_id, FinishReason.ABORT, why)


def _failure(engine, choices: list[Choice]) -> OpenAIError | None:
    """The HTTP error for the first choice that failed: overdue 504, engine stopped 503, broken 500."""
    failed = next((c for c in choices if c.finish_reason in FinishReason.FAILED), None)
    if failed is None:
        return None
    reason, error = failed.finish_reason, failed.req.error or failed.finish_reason
    if reason == FinishReason.TIMEOUT:
        return OpenAIError(504, error)
    if reason == FinishReason.ABORT or engine.failure is not None:
        return OpenAIError(503, f"the lab engine stopped before the request finished ({error}); retry")
    return OpenAIError(500, error)


class _AbortingStream(StreamingResponse):
    """However the stream ends (done, client gone, cancelled at shutdown), what still runs is aborted."""

    def __init__(self, engine, choices: list[Choice], content, **kwargs) -> None:
        super().__init__(content, **kwargs)
        self._engine, self._choices = engine, choices

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            _abort_unfinished(self._engine, self._choices, "the client disconnected")


async def _stream(engine, choices: list[Choice], request: Request, request_id: str, model: str, include_usage: bool):
    async for _ in _progress(engine, choices, request):
        for c in choices:
            while c.pending:
                yield _sse(_body(request_id, model, [(c.index, c.pending.pop(0), None)]))
    failure = _failure(engine, choices)
    if failure is not None:
        yield _sse(error_body("/v1/", failure.status, failure.message))
    else:
        for c in choices:
            yield _sse(_body(request_id, model, [(c.index, "".join(c.pending), c.finish_reason)]))
        if include_usage:
            yield _sse(_body(request_id, model, [], _usage(choices)))
    yield "data: [DONE]\n\n"


def _usage(choices: list[Choice]) -> dict:
    prompt = sum(c.req.num_prompt_tokens for c in choices)
    completion = sum(c.tokens for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def _body(request_id: str, model: str, choices: list[tuple[int, str, str | None]], usage: dict | None = None) -> dict:
    out = {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model,
           "choices": [{"index": i, "text": text, "finish_reason": reason, "logprobs": None}
                       for i, text, reason in choices]}
    if usage is not None:
        out["usage"] = usage
    return out
