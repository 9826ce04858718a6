"""The step cost of an engine read from outside, fitted on what its `llm_request` spans say instead
of its steps (which it does not publish): each request's prefill interval is a step (or a few) that
prefilled its prompt beside the requests decoding then; each request's decode interval is `output -
1` steps whose mean time is the interval over that count, beside the requests decoding with it and
the prompts prefilled meanwhile. Those become pseudo-steps with the features of agent/whatif/fit.py,
averaged where they stand for many steps, and are fitted the same way. The KV term is priced as on
the engine's own steps, in the tokens the sequences hold (a sequence in its decode holds on average
its prompt and half its output); a pseudo-step serving several models runs one forward pass per
model.

What this loses: a prefill chunked over several steps reads as one step of the whole prompt; the
queue's reason and the engine's settings are not in the spans (the settings come from the caller).
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from itertools import accumulate

from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.whatif.fit import StepCost, fit_steps
from stagelens.whatif.span_overlaps import Coverage, Holding, LongestOverlap, exact_scale

MAX_LAGS = 256


def pseudo_steps(timelines: list[RequestTimeline], chunk: int | None = None) -> list[dict]:
    """Pseudo-steps (agent/bundle.py STEP_FIELDS) from span timelines; `chunk`: the token budget
    a prompt is chunked at (chunked prefill on), so that a longer prompt's prefill interval is
    that many steps. What each asks of the other requests is answered in O(log n)
    (agent/whatif/span_overlaps.py), not by a pass over them: a 10-minute recording at 50
    requests a second is 30,000 of them."""
    spans = []
    for t in timelines:
        if t.first_token is None or t.finished is None or not t.chunks:
            continue
        prefill = t.chunks[0]
        spans.append((t.prompt_tokens, t.output_tokens, prefill.start, prefill.end, t.first_token,
                      t.finished, t.model))
    middles = [(p_start + p_end) / 2 for _, _, p_start, p_end, _, _, _ in spans]
    around = _around_prefills(spans, middles)
    prefilled = _Prefilled(spans, middles)
    scale = exact_scale([x for span in spans for x in span[2:6]])
    # each decoding: its interval, weighted by twice its tokens held (an integer: prompt + output /
    # 2, doubled)
    decoding = Coverage([(first, end, 2 * prompt + output) for prompt, output, _, _, first, end, _ in spans], scale)
    models = dict.fromkeys(span[6] for span in spans)       # in the order they first come
    longest = {m: LongestOverlap([(f, e) for _, _, _, _, f, e, o in spans if o == m and f < e]) for m in models}
    steps = []
    for i, (prompt, output, p_start, p_end, first, end, model) in enumerate(spans):
        # the prefill: this prompt and those prefilled in the same step(s), beside the requests
        # decoding then
        n_decoding, doubled_held, together, together_pairs, n_models = around[i]
        held = doubled_held / 2
        if chunk and prompt > chunk:
            # chunked: its mean chunk, each over the prompt prefilled so far, beside the same
            # decodes
            n = -(-prompt // chunk)
            pairs = sum(min(chunk, prompt - k * chunk) * min(prompt, (k + 1) * chunk) for k in range(n))
            steps.append(_step(p_start, p_start + (p_end - p_start) / n, prompt / n, pairs / n,
                               n_decoding, held + prompt / 2, n_models))
        else:
            steps.append(_step(p_start, p_end, together, together_pairs, n_decoding,
                               held + together, n_models))
        if output < 2 or end <= first:
            continue
        # its decode: output - 1 steps, beside the others decoding and the prompts prefilled in the
        # meantime
        n = output - 1
        # its own interval, left out: the others' shares of it
        own = scale(end) - scale(first)
        covered, covered_doubled = decoding.covered(first, end)
        mean_decoding = 1 + (covered - own) / own
        kv = prompt + output / 2 + (covered_doubled - (2 * prompt + output) * own) / (2 * own)
        # each other model served beside it: its forward pass in the share of the steps that model's
        # requests ran
        others = sum(longest[m].longest(first, end) / (end - first) for m in models if m != model)
        prompts, pairs = prefilled.within(first, end, i)
        steps.append(_step(first, first + (end - first) / n, prompts / n, pairs / n, mean_decoding,
                           kv, 1 + others))
    return steps


def _around_prefills(spans: list[tuple], middles: list[float]) -> list[tuple[int, int, int, int, int]]:
    """At the middle of each prefill: (requests decoding but its own, twice the tokens they hold,
    the prompts prefilling, their squares, the models of both), swept in rising order of the
    middle."""
    decoding = Holding([(f, e, 2 * prompt + output, m) for prompt, output, _, _, f, e, m in spans])
    prefilling = Holding([(ps, pe, prompt, m) for prompt, _, ps, pe, _, _, m in spans])
    squares = Holding([(ps, pe, prompt * prompt, m) for prompt, _, ps, pe, _, _, m in spans])
    out: list = [None] * len(spans)
    for i in sorted(range(len(spans)), key=middles.__getitem__):
        x = middles[i]
        for holding in (decoding, prefilling, squares):
            holding.at(x)
        prompt, output, _, _, f, e, model = spans[i]
        n, doubled = decoding.count, decoding.weight
        own_model = decoding.models[model]
        if f <= x < e:          # its own decode is not beside its prefill
            n, doubled, own_model = n - 1, doubled - (2 * prompt + output), own_model - 1
        models = set(decoding.models) | set(prefilling.models)
        if model not in prefilling.models and not own_model:
            models.discard(model)
        out[i] = (n, doubled, prefilling.weight, squares.weight, len(models))
    return out


class _Prefilled:
    """The prompts whose prefill's middle falls in [a, b), and their squares, but one request's
    own."""

    def __init__(self, spans: list[tuple], middles: list[float]) -> None:
        order = sorted(range(len(spans)), key=middles.__getitem__)
        self.middles, self.spans = middles, spans
        self.sorted_middles = [middles[i] for i in order]
        self.prompts = [0, *accumulate(spans[i][0] for i in order)]
        self.squares = [0, *accumulate(spans[i][0] ** 2 for i in order)]

    def within(self, a: float, b: float, own: int) -> tuple[int, int]:
        lo, hi = bisect_left(self.sorted_middles, a), bisect_left(self.sorted_middles, b)
        prompts, squares = self.prompts[hi] - self.prompts[lo], self.squares[hi] - self.squares[lo]
        if a <= self.middles[own] < b:
            prompt = self.spans[own][0]
            prompts, squares = prompts - prompt, squares - prompt * prompt
        return prompts, squares


def _step(start: float, end: float, prefill: float, pairs: float, decoding: float, kv_tokens: float,
          forwards: float) -> dict:
    return {"index": 0, "start": start, "end": end, "prefill_tokens": prefill,
            "prefill_pairs": pairs, "decode_tokens": decoding, "prefill_seqs": 1 if prefill else 0,
            "decode_seqs": decoding, "kv_tokens_cached": kv_tokens, "kv_slots_reserved": kv_tokens,
            "waiting": 0, "running": decoding, "preempted": 0, "loading": False,
            "forwards": max(1, forwards)}


def fit_spans(timelines: list[RequestTimeline], chunk: int | None = None) -> StepCost:
    cost = fit_steps(pseudo_steps(timelines, chunk), busy_gap=0.0, sequential=False)
    return dataclasses.replace(cost, output_lags_s=output_lags(timelines))


def output_lags(timelines: list[RequestTimeline]) -> tuple[float, ...]:
    """From each prompt's prefill interval ending to its first token reaching the span, as seen
    (at most MAX_LAGS of them, evenly taken): vLLM V1 hands a step's tokens to its API process
    while the next step runs, so a token is seen about a step after the step that made it (a
    median of 3.8 ms on its CPU build, as long as a 3.7 ms prefill, and up to 15 ms). The
    simulator's tokens are its steps' ends: each request's first token and end take one of these
    lags, in turn, so that the tail a slow hand-over makes is replayed too."""
    lags = sorted(t.first_token - t.chunks[-1].end for t in timelines
                  if t.chunks and t.first_token is not None and t.first_token >= t.chunks[-1].end)
    step = max(1, len(lags) // MAX_LAGS)
    return tuple(lags[::step])
