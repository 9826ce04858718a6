"""Span names and attributes: vLLM's request-span attributes, the GenAI conventions, ours."""

from __future__ import annotations

from stagelens.engine_hooks.records.timeline import PrefillChunk, RequestTimeline, Wait

# GenAI semantic conventions and vLLM's request-span attributes (engine_hooks/records/vllm_names.py)
from stagelens.engine_hooks.records.vllm_names import (  # noqa: F401  (the names spans.py reads from here)
    E2E,
    FINISH_REASONS,
    OPERATION_NAME,
    PROVIDER_NAME,
    REQUEST_ID,
    REQUEST_MODEL,
    RESPONSE_MODEL,
    SYSTEM,
    TIME_IN_QUEUE,
    TIME_TO_FIRST_TOKEN,
)
from stagelens.engine_hooks.records.vllm_names import LLM_REQUEST as ROOT  # noqa: F401
from stagelens.engine_hooks.records.vllm_names import USAGE_INPUT_TOKENS as INPUT_TOKENS
from stagelens.engine_hooks.records.vllm_names import USAGE_OUTPUT_TOKENS as OUTPUT_TOKENS

QUEUE_WAIT = "queue_wait"
PREFILL_CHUNK = "prefill_chunk"
DECODE = "decode"
PREEMPTED = "preempted"

PROVIDER = "stagelens-lab"
OPERATION = "text_completion"

# ours
SCHEDULER_WAIT_S = "stagelens.scheduler_wait_s"
PREEMPTIONS = "stagelens.preemptions"
FINISH_REASON = "stagelens.finish_reason"
WAIT_S_PREFIX = "stagelens.wait_s."          # + reason: seconds waited for that reason
WAIT_REASON = "stagelens.wait.reason"
WAIT_STEP = "stagelens.wait.step"
WAIT_HELD_BY = "stagelens.wait.held_by"
PREFILL_TOKENS = "stagelens.prefill.tokens"
STEP = "stagelens.step"
PREEMPTION_INDEX = "stagelens.preemption.index"


def root_attributes(tl: RequestTimeline, end: float) -> dict:
    attrs: dict = {
        OPERATION_NAME: OPERATION,
        PROVIDER_NAME: PROVIDER,
        SYSTEM: PROVIDER,
        REQUEST_ID: tl.request_id,
        REQUEST_MODEL: tl.model,
        RESPONSE_MODEL: tl.model,
        INPUT_TOKENS: tl.prompt_tokens,
        OUTPUT_TOKENS: tl.output_tokens,
        TIME_IN_QUEUE: tl.scheduler_wait_s,
        SCHEDULER_WAIT_S: tl.scheduler_wait_s,
        PREEMPTIONS: tl.preemptions,
        E2E: end - tl.arrival,
    }
    if tl.first_token is not None:
        attrs[TIME_TO_FIRST_TOKEN] = tl.first_token - tl.arrival
    if tl.finish_reason is not None:
        attrs[FINISH_REASON] = tl.finish_reason
        attrs[FINISH_REASONS] = (tl.finish_reason,)
    for reason, seconds in tl.wait_by_reason().items():
        attrs[WAIT_S_PREFIX + reason] = seconds
    return attrs


def wait_attributes(w: Wait) -> dict:
    attrs: dict = {WAIT_REASON: w.reason}
    if w.step is not None:
        attrs[WAIT_STEP] = w.step
    if w.held_by is not None:
        attrs[WAIT_HELD_BY] = w.held_by
    return attrs


def chunk_attributes(c: PrefillChunk) -> dict:
    return {PREFILL_TOKENS: c.tokens, STEP: c.step}
