"""What the bodies of `POST /v1/completions` and `POST /v1/chat/completions` share, as OpenAI
defines them: the sampling fields, their bounds, and the fields the lab engine accepts only at
their neutral value."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, model_validator

from stagelens.lab.bundled_engine import SEED_RANGE
from stagelens.server.errors import OpenAIError

MAX_STOPS = 4
MAX_TOKENS = 65536


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class SamplingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    model: str | None = Field(default=None,
                              description="a name from GET /v1/models; default: the first")
    temperature: float | None = Field(default=0.0, ge=0.0, le=10.0,
                                      description="0 (the default here) is greedy")
    seed: int | None = Field(default=None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    stop: str | list[str] | None = Field(default=None, description=f"up to {MAX_STOPS} sequences")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    # OpenAI's, not implemented by the lab engine: accepted only at their neutral value
    n: int | None = 1
    top_p: float | None = 1.0
    presence_penalty: float | None = 0.0
    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data):
        where = lone_surrogate_at(data)
        if where is not None:
            raise ValueError(f"{where or 'the body'}: a lone surrogate (\\ud800-\\udfff without its pair) is not "
                             "valid Unicode text")
        return data


def lone_surrogate_at(data) -> str | None:
    """The path ("messages.0.content") of the first string in a decoded JSON body that UTF-8
    cannot carry (JSON allows "\\ud800" alone; the prompt's bytes cannot be made of it), None
    when there is none. A stack, not recursion: the body's nesting is the client's choice."""
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return path
        elif isinstance(value, dict):
            stack.extend((f"{path}.{k}".lstrip("."), v) for k, v in reversed(value.items()))
            stack.extend((f"{path}.<key>".lstrip("."), k) for k in value if isinstance(k, str))
        elif isinstance(value, list):
            stack.extend((f"{path}.{i}".lstrip("."), v) for i, v in reversed(list(enumerate(value))))
    return None


# field: its neutral values, the one a 400 suggests first
SAMPLING_NEUTRAL = {"n": (1, None), "top_p": (1.0, None), "presence_penalty": (0.0, None),
                    "frequency_penalty": (0.0, None), "logit_bias": ({}, None)}


def neutral_table(own: dict[str, tuple], after: dict[str, tuple] | None = None) -> dict[str, tuple]:
    """An endpoint's neutral values in the order a 400 names them: `n`, its own, the shared rest,
    `after`."""
    return {"n": SAMPLING_NEUTRAL["n"], **own, **SAMPLING_NEUTRAL, **(after or {})}


def check_supported(body: SamplingRequest, neutral_values: dict[str, tuple]) -> None:
    """A 400 naming the first field the lab engine does not implement that is not at its neutral
    value."""
    for field, neutral in neutral_values.items():
        if getattr(body, field) not in neutral:
            hint = "; send the request several times for several completions" if field in ("n", "best_of") else ""
            raise OpenAIError(400, f"{field}: not supported by the lab engine (leave it out or set "
                                   f"it to {json.dumps(neutral[0])}){hint}", field)


def stops_of(body: SamplingRequest) -> list[str]:
    """`stop` of a completion or chat request as a list."""
    stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    if len(stops) > MAX_STOPS or any(not s for s in stops):
        raise OpenAIError(400, f"stop: up to {MAX_STOPS} non-empty sequences", "stop")
    return stops
