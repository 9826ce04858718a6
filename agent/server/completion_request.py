"""The body of `POST /v1/completions`, as OpenAI defines it, checked before anything is queued.

Fields the lab engine honours: `prompt` (a string, a list of strings, token ids, or a list of
token-id lists: one choice per prompt), `model`, `max_tokens` (null: what the context leaves),
`temperature`, `seed`, `stop`, `stream`, `stream_options.include_usage`, `user`. OpenAI fields it
does not implement are refused with a 400 that names them, unless they hold their neutral value;
fields OpenAI does not define are ignored. The bundled models are synthetic: text becomes token ids
byte by byte, ids come back as `" w<id>"`.
"""

from __future__ import annotations

from pydantic import Field

from stagelens.server.errors import OpenAIError
from stagelens.server.openai_request import MAX_TOKENS, SamplingRequest, neutral_table

MAX_PROMPTS = 32


class CompletionRequest(SamplingRequest):
    prompt: str | list[str] | list[int] | list[list[int]] = Field(
        description="text, a list of texts, token ids, or a list of token-id lists (one choice each)")
    max_tokens: int | None = Field(default=16, ge=1, le=MAX_TOKENS,
                                   description="null: up to the model's context (--max-model-len)")
    # OpenAI's, not implemented by the lab engine: accepted only at their neutral value
    best_of: int | None = None
    logprobs: int | None = None
    echo: bool | None = False
    suffix: str | None = None


COMPLETION_NEUTRAL = neutral_table({"best_of": (1, None), "logprobs": (None,),
                                    "echo": (False, None), "suffix": ("", None)})


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


def encode(prompt: str | list[int], vocab: int) -> list[int]:
    if isinstance(prompt, list):
        return prompt
    return [(b + 1) % vocab for b in prompt.encode("utf-8")]


def decode(token_ids: list[int]) -> str:
    return "".join(f" w{t}" for t in token_ids)
