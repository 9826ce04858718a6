"""The step cost of an engine read from outside, fitted on what its `llm_request` spans say instead of its
steps (which it does not publish): each request's prefill interval is a step (or a few) that prefilled its
prompt beside the requests decoding then; each request's decode interval is `output - 1` steps whose mean
time is the interval over that count, beside the requests decoding with it and the prompts prefilled
meanwhile. Those become pseudo-steps with the features of agent/whatif/fit.py, averaged where they stand
for many steps, and are fitted the same way. The KV term is priced as on the engine's own steps, in the tokens
the sequences hold (a sequence in its decode holds on average its prompt and half its output); a pseudo-step
serving several models runs one forward pass per model.

What this loses: a prefill chunked over several steps reads as one step of the whole prompt; the queue's
reason and the engine's settings are not in the spans (the settings come from the caller).
"""

from __future__ import annotations

import dataclasses

from agent.whatif.fit import StepCost, fit_steps
from engine_hooks.records.timeline import RequestTimeline

MAX_LAGS = 256


def pseudo_steps(timelines: list[RequestTimeline], chunk: int | None = None) -> list[dict]:
    """Pseudo-steps (agent/record.py STEP_FIELDS) from span timelines; `chunk`: the token budget a prompt is
    chunked at (chunked prefill on), so that a longer prompt's prefill interval is that many steps."""
    def decoding_tokens(prompt: int, output: int) -> float:   # over its decode, on average
        return prompt + output / 2

    spans = []
    for t in timelines:
        if t.first_token is None or t.finished is None or not t.chunks:
            continue
        prefill = t.chunks[0]
        spans.append((t.prompt_tokens, t.output_tokens, prefill.start, prefill.end, t.first_token, t.finished,
                      t.model))
    steps = []
    for i, (prompt, output, p_start, p_end, first, end, model) in enumerate(spans):
        # the prefill: this prompt and those prefilled in the same step(s), beside the requests decoding then
        middle = (p_start + p_end) / 2
        decoding = [(o_prompt, o_out, o_model) for j, (o_prompt, o_out, _, _, f, e, o_model) in enumerate(spans)
                    if j != i and f <= middle < e]
        together = [(o_prompt, o_model) for o_prompt, _, ps, pe, _, _, o_model in spans if ps <= middle < pe]
        models = {m for _, m in together} | {m for _, _, m in decoding}
        held = sum(decoding_tokens(pr, out) for pr, out, _ in decoding)
        if chunk and prompt > chunk:
            # chunked: its mean chunk, each over the prompt prefilled so far, beside the same decodes
            n = -(-prompt // chunk)
            pairs = sum(min(chunk, prompt - k * chunk) * min(prompt, (k + 1) * chunk) for k in range(n))
            steps.append(_step(p_start, p_start + (p_end - p_start) / n, prompt / n, pairs / n, len(decoding),
                               held + prompt / 2, len(models)))
        else:
            steps.append(_step(p_start, p_end, sum(p for p, _ in together), sum(p * p for p, _ in together),
                               len(decoding), held + sum(p for p, _ in together), len(models)))
        if output < 2 or end <= first:
            continue
        # its decode: output - 1 steps, beside the others decoding and the prompts prefilled in the meantime
        n = output - 1
        overlap = [(max(0.0, min(e, end) - max(f, first)) / (end - first), o_prompt, o_out, o_model)
                   for j, (o_prompt, o_out, _, _, f, e, o_model) in enumerate(spans) if j != i]
        prefilled = [o_prompt for j, (o_prompt, _, ps, pe, _, _, _) in enumerate(spans)
                     if j != i and first <= (ps + pe) / 2 < end]
        mean_decoding = 1 + sum(share for share, _, _, _ in overlap)
        kv = decoding_tokens(prompt, output) + sum(share * decoding_tokens(pr, out) for share, pr, out, _ in overlap)
        # each other model served beside it: its forward pass in the share of the steps that model's requests ran
        others: dict = {}
        for share, _, _, o_model in overlap:
            if o_model != model:
                others[o_model] = max(others.get(o_model, 0.0), share)
        steps.append(_step(first, first + (end - first) / n, sum(prefilled) / n, sum(p * p for p in prefilled) / n,
                           mean_decoding, kv, 1 + sum(others.values())))
    return steps


def _step(start: float, end: float, prefill: float, pairs: float, decoding: float, kv_tokens: float,
          forwards: float) -> dict:
    return {"index": 0, "start": start, "end": end, "prefill_tokens": prefill, "prefill_pairs": pairs,
            "decode_tokens": decoding, "prefill_seqs": 1 if prefill else 0, "decode_seqs": decoding,
            "kv_tokens_cached": kv_tokens, "kv_slots_reserved": kv_tokens, "waiting": 0, "running": decoding,
            "preempted": 0, "loading": False, "forwards": max(1, forwards)}


def fit_spans(timelines: list[RequestTimeline], chunk: int | None = None) -> StepCost:
    cost = fit_steps(pseudo_steps(timelines, chunk), busy_gap=0.0, sequential=False)
    return dataclasses.replace(cost, output_lags_s=output_lags(timelines))


def output_lags(timelines: list[RequestTimeline]) -> tuple[float, ...]:
    """From each prompt's prefill interval ending to its first token reaching the span, as seen (at most
    MAX_LAGS of them, evenly taken): vLLM V1 hands a step's tokens to its API process while the next step runs,
    so a token is seen about a step after the step that made it (a median of 3.8 ms on its CPU build, as long as
    a 3.7 ms prefill, and up to 15 ms). The simulator's tokens are its steps' ends: each request's first token
    and end take one of these lags, in turn, so that the tail a slow hand-over makes is replayed too."""
    lags = sorted(t.first_token - t.chunks[-1].end for t in timelines
                  if t.chunks and t.first_token is not None and t.first_token >= t.chunks[-1].end)
    step = max(1, len(lags) // MAX_LAGS)
    return tuple(lags[::step])
