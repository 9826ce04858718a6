"""What-if's result as text (`stagelens whatif` without `--json`): the fit in words, today's
prediction beside what was measured, each candidate's, and each stage's state."""

from __future__ import annotations

from stagelens.lab.fixes import as_flags
from stagelens.whatif.figures import COMPARED
from stagelens.whatif.fit import StepCost, duration
from stagelens.whatif.predict import Prediction
from stagelens.whatif.predict_all import WhatIf


def _ms(value) -> str:
    return "-" if value is None else f"{value * 1000:.0f} ms"


def _figure(key: str, value) -> str:
    if value is None:
        return "-"
    if key.endswith("_s") and not key.endswith("_per_s"):
        return _ms(value)
    if key.endswith("_ratio_mean"):
        return f"{value:.0%}"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


ROWS = (*COMPARED, "preemptions", "kv_used_ratio_mean")


def _cold_note(c: StepCost) -> str:
    warm, cold = c.coefficients["prefill_tokens"], c.coefficients["cold_prefill_tokens"]
    if c.cold_after_s is None or not cold:
        return ""
    return (f"; a prefill over {c.cold_after_s:g} s after the last runs cold: "
            f"{duration(warm + cold)} a prompt token against {duration(warm)} warm")


def fit_terms(c: StepCost) -> str:
    """The fitted step cost in words and units."""
    k = c.coefficients
    parts = [f"{duration(k['fixed'])} a step", f"{duration(k['decode_seqs'])} a decoding sequence",
             f"{duration(k['prefill_tokens'])} a prompt token",
             f"{duration(k['kv_tokens'] * 1000)} a thousand KV tokens held"]
    if k["extra_forwards"]:
        parts.append(f"{duration(k['extra_forwards'])} a model beyond the first in a batch")
    seen = c.observed_max
    return (f"step cost: {', '.join(parts)}; fitted on batches up to {seen['decode_seqs']:.0f} "
            f"decoding sequences and {seen['prefill_tokens']:.0f} prompt tokens a step")


def beyond_lines(c: StepCost) -> list[str]:
    if c.beyond is None:
        return []
    lines = [f"past that: {line}" for line in c.beyond.describe()]
    if c.beyond_scale != 1:
        lines.append(f"  scaled by {c.beyond_scale:.2f}: the work past the recorded batches at "
                     f"that share of the datasheet's rates")
    return lines


def length_lines(w: WhatIf) -> list[str]:
    """Where max_model_len came from, for an engine read from outside, and the requests it leaves
    out or cuts (agent/whatif/predict.py `left_out`): the same for every candidate, which cannot
    change it."""
    settings, figures, total = w.today.settings, w.today.figures, len(w.observed.requests)
    longest = f"max_model_len ({settings.max_model_len} tokens)"
    lines = []
    if settings.read_from_outside:
        lines.append(f"an engine read from outside: {longest}; the longest request recorded held "
                     f"{w.observed.longest_request} tokens, prompt and output (--today "
                     f"max-model-len=N sets it)")
    if figures.get("requests_never_run"):
        lines.append(f"{figures['requests_never_run']} of {total} requests could never run: a "
                     f"prompt of {longest} or more, which the engine refuses; left out of every "
                     f"prediction")
    if figures.get("requests_cut_at_max_model_len"):
        lines.append(f"{figures['requests_cut_at_max_model_len']} of {total} requests cut at "
                     f"{longest}: their prompt and output are longer, and each is predicted to end "
                     f"there")
    return lines


def render_whatif(w: WhatIf) -> str:
    c = w.cost
    on = "steps" if w.observed.steps else "pseudo-steps from the requests' prefill and decode intervals"
    lines = [f"replayed {len(w.observed.requests)} requests of {w.observed.source}"
             + (f", arriving {w.scale_rate:g}x as fast" if w.scale_rate != 1 else ""), *length_lines(w),
             f"step cost fitted on {c.steps} {on}: median error {c.error_median:.0%}, p90 "
             f"{c.error_p90:.0%}; {c.loads} model "
             f"loads seen" + _cold_note(c), fit_terms(c), *beyond_lines(c)]
    columns = [("today measured", w.measured), ("today predicted", w.today.figures)]
    columns += [(f"candidate {i}", p.figures) for i, (_, p) in enumerate(w.candidates, 1)]
    lines += [f"candidate {i}: {as_flags(changes)}"
              + ("  (predicted alike today: at this load the change binds nowhere)" if w.alike_today(p) else "")
              for i, (changes, p) in enumerate(w.candidates, 1)]
    errors = w.errors()
    width = max(len(r) for r in ROWS)
    head = f"{'':<{width}}  " + "  ".join(f"{name:>15}" for name, _ in columns) + f"  {'error':>7}"
    lines += ["(error: today's prediction against what was measured)", "", head]
    for key in ROWS:
        err = errors.get(key)
        cells = "  ".join(f"{_figure(key, figs.get(key)):>15}" for _, figs in columns)
        lines.append(f"{key:<{width}}  {cells}  {'' if err is None else f'{err:+.0%}':>7}")
    stages = [("today", w.today)] + [(f"candidate {i}", p) for i, (_, p) in enumerate(w.candidates, 1)]
    lines.append("")
    for name, p in stages:
        states = ", ".join(f"{stage} {s['state']}" for stage, s in p.stages.items())
        lines.append(f"{name}: {states}{_range_note(p, c)}")
    return "\n".join(lines)


def _range_note(p: Prediction, c: StepCost) -> str:
    if not p.extrapolated:
        return ""
    share = f"{p.outside_share:.0%} of steps past the recorded batches"
    if c.beyond is None:
        return f"  (extrapolated: {share}, priced by the fit's straight line: no profile or prior to go by)"
    if p.bounds:
        low, high = p.bounds["ttft_p99_s"]
        return (f"  ({share}, priced by the prior: P99 TTFT {_ms(low)} to {_ms(high)} if that part "
                f"is off by {c.beyond.spread:g}x either way)")
    return f"  ({share}, priced by the measured profile)"
