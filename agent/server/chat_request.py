"""The body of `POST /v1/chat/completions`, as OpenAI defines it, and the lab models' chat template.

The lab's models are synthetic and have no tokenizer of text, so a chat becomes one prompt text by a
fixed template, and that text becomes token ids as a completion prompt does (UTF-8 bytes, each + 1):

    <|system|>\\nYou are terse.\\n<|user|>\\nHello\\n<|assistant|>\\n

that is `<|ROLE|>`, a newline, the content and a newline for each message in order, then
`<|assistant|>` and a newline for the reply. A message's content is a string, null (empty), or a
list of `{"type": "text", "text": ...}` parts joined by newlines; `name` and tool calls are not
rendered.

Fields the lab engine honours: `messages`, `model`, `max_completion_tokens` (or the older
`max_tokens`; neither: what the context leaves), `temperature` (0, greedy, by default here), `seed`,
`stop`, `stream`, `stream_options.include_usage`, `user`. OpenAI fields it does not implement (`n` >
1, `logprobs`, `top_p`, the penalties, `logit_bias`, `tools`, `response_format` other than text) are
refused with a 400 that names them unless they hold their neutral value; fields OpenAI does not
define are ignored.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stagelens.server.completion_request import encode
from stagelens.server.errors import OpenAIError
from stagelens.server.openai_request import MAX_TOKENS, SamplingRequest, neutral_table

MAX_MESSAGES = 1024          # the body limit (1 MiB) and --max-model-len bound the rest
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str = Field(description='only "text" parts are supported')
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal[ROLES]
    content: str | list[ContentPart] | None = None
    name: str | None = Field(default=None, description="accepted, not rendered")


class ChatRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS,
                                              description="default: what the context (--max-model-len) leaves")
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS,
                                   description="OpenAI's older name; max_completion_tokens wins when both are set")
    # OpenAI's, not implemented by the lab engine: accepted only at their neutral value
    logprobs: bool | None = False
    top_logprobs: int | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    response_format: dict | None = None


CHAT_NEUTRAL = neutral_table({"logprobs": (False, None), "top_logprobs": (0, None)},
                             {"tools": ([], None), "tool_choice": ("none", "auto", None),
                              "response_format": ({"type": "text"}, None)})


def render(messages: list[ChatMessage]) -> str:
    """The lab models' chat template (the module's docstring)."""
    return "".join(f"<|{m.role}|>\n{_content(m, i)}\n" for i, m in enumerate(messages)) + "<|assistant|>\n"


def _content(message: ChatMessage, i: int) -> str:
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    texts = []
    for j, part in enumerate(message.content):
        if part.type != "text" or part.text is None:
            raise OpenAIError(400, f"messages.{i}.content.{j}: only text parts are supported by the lab engine, "
                                   f"got type {part.type!r}" + (" without text" if part.type == "text" else ""),
                              f"messages.{i}.content.{j}")
        texts.append(part.text)
    return "\n".join(texts)


def prompt_of(body: ChatRequest, vocab: int) -> list[int]:
    """The chat's prompt token ids: the rendered template, byte by byte."""
    return encode(render(body.messages), vocab)


def max_tokens_of(body: ChatRequest) -> int | None:
    """`max_completion_tokens`, else `max_tokens`; None when neither is set."""
    return body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
