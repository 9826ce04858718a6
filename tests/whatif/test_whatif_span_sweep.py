"""The span fit's pseudo-steps (agent/whatif/spans.py) come from sorted sweeps, not from comparing every span with
every other (4,000 requests took 15 s, 8,000 79 s): the same pseudo-steps as that straightforward comparison,
on seeded spans that overlap, tie, serve several models, sit at epoch times and break the rules (a prefill ending
after its first token, a span ending before it), and a window where every span overlaps every other is read."""

import random

import pytest

from stagelens.engine_hooks.records.timeline import PrefillChunk, RequestTimeline
from stagelens.whatif.spans import _step, pseudo_steps

COUNTED = ("prefill_tokens", "prefill_pairs", "prefill_seqs", "forwards", "start", "end")     # the same, exactly
SUMMED = ("decode_tokens", "decode_seqs", "running", "kv_tokens_cached", "kv_slots_reserved")  # to the last bits


def compared_with_every_other(timelines, chunk=None):
    """The pseudo-steps as spans.py made them before: each span compared with every other."""
    def decoding_tokens(prompt, output):
        return prompt + output / 2

    spans = [(t.prompt_tokens, t.output_tokens, t.chunks[0].start, t.chunks[0].end, t.first_token, t.finished,
              t.model) for t in timelines if t.first_token is not None and t.finished is not None and t.chunks]
    steps = []
    for i, (prompt, output, p_start, p_end, first, end, model) in enumerate(spans):
        middle = (p_start + p_end) / 2
        decoding = [(o_prompt, o_out, o_model) for j, (o_prompt, o_out, _, _, f, e, o_model) in enumerate(spans)
                    if j != i and f <= middle < e]
        together = [(o_prompt, o_model) for o_prompt, _, ps, pe, _, _, o_model in spans if ps <= middle < pe]
        models = {m for _, m in together} | {m for _, _, m in decoding}
        held = sum(decoding_tokens(pr, out) for pr, out, _ in decoding)
        if chunk and prompt > chunk:
            n = -(-prompt // chunk)
            pairs = sum(min(chunk, prompt - k * chunk) * min(prompt, (k + 1) * chunk) for k in range(n))
            steps.append(_step(p_start, p_start + (p_end - p_start) / n, prompt / n, pairs / n, len(decoding),
                               held + prompt / 2, len(models)))
        else:
            steps.append(_step(p_start, p_end, sum(p for p, _ in together), sum(p * p for p, _ in together),
                               len(decoding), held + sum(p for p, _ in together), len(models)))
        if output < 2 or end <= first:
            continue
        n = output - 1
        overlap = [(max(0.0, min(e, end) - max(f, first)) / (end - first), o_prompt, o_out, o_model)
                   for j, (o_prompt, o_out, _, _, f, e, o_model) in enumerate(spans) if j != i]
        prefilled = [o_prompt for j, (o_prompt, _, ps, pe, _, _, _) in enumerate(spans)
                     if j != i and first <= (ps + pe) / 2 < end]
        mean_decoding = 1 + sum(share for share, _, _, _ in overlap)
        kv = decoding_tokens(prompt, output) + sum(share * decoding_tokens(pr, out) for share, pr, out, _ in overlap)
        others: dict = {}
        for share, _, _, o_model in overlap:
            if o_model != model:
                others[o_model] = max(others.get(o_model, 0.0), share)
        steps.append(_step(first, first + (end - first) / n, sum(prefilled) / n, sum(p * p for p in prefilled) / n,
                           mean_decoding, kv, 1 + sum(others.values())))
    return steps


def spans(seed: int, count: int, origin: float, grid: float | None) -> list[RequestTimeline]:
    rng = random.Random(seed)
    out, t = [], origin
    for i in range(count):
        t += rng.expovariate(20.0)
        start = round(t / grid) * grid if grid else t
        p_end = start + rng.choice([0.01, 0.02, 0.05, 0.3])
        first = p_end + (rng.choice([0.0, 0.004]) if i % 17 else -0.006)     # now and then before the prefill ends
        finished = first + (rng.expovariate(1.0) if i % 23 else -0.1)        # now and then before its first token
        out.append(RequestTimeline(f"r{i}", f"model-{rng.choice([0, 0, 1, 2])}", rng.choice([16, 100, 700, 2000]),
                                   rng.choice([1, 2, 5, 40]), start, finished, first_token=first,
                                   chunks=[PrefillChunk(start, p_end, 0, 0)]))
    return out


@pytest.mark.parametrize("origin, grid", [(0.0, None), (0.0, 0.01), (1.7e9, None), (1.7e9, 0.05)])
@pytest.mark.parametrize("chunk", [None, 512])
def test_the_sweep_makes_the_pseudo_steps_every_pair_compared_makes(origin, grid, chunk):
    timelines = spans(seed=int(origin) % 97 + (chunk or 0), count=400, origin=origin, grid=grid)
    swept, compared = pseudo_steps(timelines, chunk), compared_with_every_other(timelines, chunk)
    assert len(swept) == len(compared)
    assert any(s["forwards"] > 1.5 for s in compared) and any(s["decode_seqs"] > 3 for s in compared)
    for i, (s, c) in enumerate(zip(swept, compared, strict=True)):
        assert {k: s[k] for k in COUNTED} == {k: c[k] for k in COUNTED}, i
        for key in SUMMED:
            assert s[key] == pytest.approx(c[key], rel=1e-12, abs=1e-12), (i, key)


def test_a_window_where_every_span_overlaps_every_other_is_read():
    """A lying `--connect` window: 20,000 spans of three models, each decoding over the whole window."""
    timelines = [RequestTimeline(f"r{i}", f"m{i % 3}", 100, 50, i * 1e-4, 10.0 + i * 1e-4, first_token=2.0 + i * 1e-4,
                                 chunks=[PrefillChunk(i * 1e-4, 1.0 + i * 1e-4, 0, 0)]) for i in range(20_000)]
    steps = pseudo_steps(timelines)
    assert len(steps) == 40_000
    last_decode = steps[-1]
    # its decode [3.9999, 11.9999) shares 6.0001 s and j / 10,000 s more with the decode of each other j
    assert last_decode["decode_seqs"] == pytest.approx(1 + sum(6.0001 + j * 1e-4 for j in range(19_999)) / 8)
    assert last_decode["forwards"] == pytest.approx(1 + 7.9999 / 8 + 7.9998 / 8)     # r19998 of m0, r19997 of m2
