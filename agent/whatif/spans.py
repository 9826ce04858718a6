"""The step cost of an engine read from outside, fitted on what its `llm_request` spans say instead of its
steps (which it does not publish): each request's prefill interval is a step (or a few) that prefilled its
prompt beside the requests decoding then; each request's decode interval is `output - 1` steps whose mean
time is the interval over that count, beside the requests decoding with it and the prompts prefilled
meanwhile. Those become pseudo-steps with the features of agent/whatif/fit.py, averaged where they stand
for many steps, and are fitted the same way.

What this loses: a prefill chunked over several steps reads as one step of the whole prompt; the queue's
reason and the engine's settings are not in the spans (the settings come from the caller).
"""

from __future__ import annotations

from agent.whatif.fit import StepCost, fit_steps


def pseudo_steps(timelines: list[dict]) -> list[dict]:
    """Pseudo-steps (agent/record.py STEP_FIELDS) from span timelines (`RequestTimeline.to_dict()`)."""
    spans = []
    for t in timelines:
        chunks = t.get("chunks") or []
        if t.get("first_token") is None or t.get("finished") is None or not chunks:
            continue
        spans.append((t["prompt_tokens"], t.get("output_tokens") or 0, chunks[0]["start"], chunks[0]["end"],
                      t["first_token"], t["finished"]))
    steps = []
    for i, (prompt, output, p_start, p_end, first, end) in enumerate(spans):
        # the prefill: this prompt and those prefilled in the same step(s), beside the requests decoding then
        middle = (p_start + p_end) / 2
        decoding = [(o_prompt, o_out) for j, (o_prompt, o_out, _, _, f, e) in enumerate(spans)
                    if j != i and f <= middle < e]
        together = [o_prompt for o_prompt, _, ps, pe, _, _ in spans if ps <= middle < pe]
        steps.append(_step(p_start, p_end, sum(together), sum(p * p for p in together), len(decoding),
                           sum(pr + out // 2 for pr, out in decoding) + sum(together)))
        if output < 2 or end <= first:
            continue
        # its decode: output - 1 steps, beside the others decoding and the prompts prefilled in the meantime
        n = output - 1
        overlap = [(max(0.0, min(e, end) - max(f, first)) / (end - first), o_prompt, o_out)
                   for j, (o_prompt, o_out, _, _, f, e) in enumerate(spans) if j != i]
        prefilled = [o_prompt for j, (o_prompt, _, ps, pe, _, _) in enumerate(spans)
                     if j != i and first <= (ps + pe) / 2 < end]
        mean_decoding = 1 + sum(share for share, _, _ in overlap)
        kv = prompt + output // 2 + sum(share * (pr + out // 2) for share, pr, out in overlap)
        steps.append(_step(first, first + (end - first) / n, sum(prefilled) / n, sum(p * p for p in prefilled) / n,
                           mean_decoding, kv))
    return steps


def _step(start: float, end: float, prefill: float, pairs: float, decoding: float, kv: float) -> dict:
    return {"index": 0, "start": start, "end": end, "prefill_tokens": prefill, "prefill_pairs": pairs,
            "decode_tokens": decoding, "prefill_seqs": 1 if prefill else 0, "decode_seqs": decoding,
            "kv_tokens_cached": kv, "kv_slots_reserved": kv, "waiting": 0, "running": decoding, "preempted": 0,
            "loading": False, "forwards": 1}


def fit_spans(timelines: list[dict]) -> StepCost:
    return fit_steps(pseudo_steps(timelines), busy_gap=0.0)
