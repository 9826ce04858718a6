"""The body of `POST /v1/completions`, as OpenAI defines it, checked before anything is queued.

Fields the lab engine honours: `prompt` (a string, a list of strings, token ids, or a list of token-id
lists: one choice per prompt), `model`, `max_tokens` (null: what the context leaves), `temperature`,
`seed`, `stop`, `stream`, `stream_options.include_usage`, `user`. OpenAI fields it does not implement
are refused with a 400 that names them, unless they hold their neutral value; fields OpenAI does not
define are ignored.
The bundled models are synthetic: text becomes token ids byte by byte, ids come back as `" w<id>"`.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from agent.server.errors import OpenAIError
from engine_hooks.engine.request import SEED_RANGE

MAX_PROMPTS = 32
MAX_STOPS = 4
MAX_TOKENS = 65536


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    prompt: str | list[str] | list[int] | list[list[int]] = Field(
        description="text, a list of texts, token ids, or a list of token-id lists (one choice each)")
    model: str | None = Field(default=None, description="a name from GET /v1/models; default: the first")
    max_tokens: int | None = Field(default=16, ge=1, le=MAX_TOKENS,
                                   description="null: up to the model's context (--max-model-len)")
    temperature: float | None = Field(default=0.0, ge=0.0, le=10.0, description="0 (the default here) is greedy")
    seed: int | None = Field(default=None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    stop: str | list[str] | None = Field(default=None, description=f"up to {MAX_STOPS} sequences")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # OpenAI's, not implemented by the lab engine: accepted only at their neutral value
    n: int | None = 1
    best_of: int | None = None
    logprobs: int | None = None
    echo: bool | None = False
    suffix: str | None = None
    top_p: float | None = 1.0
    presence_penalty: float | None = 0.0
    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None


# field: its neutral values, the one a 400 suggests first
COMPLETION_NEUTRAL = {"n": (1, None), "best_of": (1, None), "logprobs": (None,), "echo": (False, None),
                      "suffix": ("", None), "top_p": (1.0, None), "presence_penalty": (0.0, None),
                      "frequency_penalty": (0.0, None), "logit_bias": ({}, None)}


def check_supported(body: BaseModel, neutral_values: dict[str, tuple]) -> None:
    """A 400 naming the first field the lab engine does not implement that is not at its neutral value."""
    for field, neutral in neutral_values.items():
        if getattr(body, field) not in neutral:
            hint = "; send the request several times for several completions" if field in ("n", "best_of") else ""
            raise OpenAIError(400, f"{field}: not supported by the lab engine (leave it out or set it to "
                                   f"{json.dumps(neutral[0])}){hint}", field)


def prompts_of(body: CompletionRequest, vocab: int) -> list[list[int]]:
    """The request's prompts as token-id lists, one per choice."""
    prompt = body.prompt
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        prompt = [prompt]
    if not prompt:
        raise OpenAIError(400, "prompt: must not be empty", "prompt")
    if len(prompt) > MAX_PROMPTS:
        raise OpenAIError(400, f"prompt: at most {MAX_PROMPTS} prompts in one request, got {len(prompt)}", "prompt")
    out = [encode(p, vocab) for p in prompt]
    if any(not ids for ids in out):
        raise OpenAIError(400, "prompt: every prompt needs at least one token", "prompt")
    return out


def stops_of(body) -> list[str]:
    """`stop` of a completion or chat request as a list."""
    stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    if len(stops) > MAX_STOPS or any(not s for s in stops):
        raise OpenAIError(400, f"stop: up to {MAX_STOPS} non-empty sequences", "stop")
    return stops


def encode(prompt: str | list[int], vocab: int) -> list[int]:
    if isinstance(prompt, list):
        return prompt
    return [(b + 1) % vocab for b in prompt.encode("utf-8")]


def decode(token_ids: list[int]) -> str:
    return "".join(f" w{t}" for t in token_ids)
