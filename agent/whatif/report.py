"""What-if end to end on an observed run: the fit, today's prediction beside what was measured (the fidelity
check), and each candidate's prediction; as the `--json` document and as text."""

from __future__ import annotations

from dataclasses import dataclass

from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.errors import UserError
from stagelens.lab.fixes import as_flags
from stagelens.whatif.figures import COMPARED, alike, relative_error, serving_figures
from stagelens.whatif.fit import FitError, StepCost, duration, fit_steps
from stagelens.whatif.predict import Prediction, predict, predicted_range
from stagelens.whatif.settings import Settings, as_set_flags
from stagelens.whatif.spans import fit_spans
from stagelens.whatif.wider import Wider
from stagelens.whatif.workload import Observed, scaled

# the figures a candidate must share with today's to be predicted alike it
ALIKE_FIGURES = ("ttft_p50_s", "ttft_p99_s", "latency_p99_s", "throughput_tokens_per_s")


@dataclass
class WhatIf:
    observed: Observed
    cost: StepCost
    today: Prediction
    measured: dict
    candidates: list[tuple[dict, Prediction]]
    replayed: list          # the requests replayed: the observed ones, maybe arriving faster (`--scale-rate`)
    scale_rate: float = 1.0

    def alike_today(self, prediction: Prediction) -> bool:
        """A candidate predicted as today: at this load its change binds nowhere the simulation can see."""
        return all(alike(self.today.figures.get(k), prediction.figures.get(k)) for k in ALIKE_FIGURES)

    def errors(self) -> dict:
        return {k: relative_error(self.today.figures.get(k), self.measured.get(k)) for k in COMPARED}

    def to_dict(self) -> dict:
        return {
            "source": self.observed.source,
            "requests": len(self.observed.requests), "scale_rate": self.scale_rate,
            "fit": {**self.cost.to_dict(), "on": "steps" if self.observed.steps else "request intervals"},
            "today": {"settings": self.today.settings.__dict__, "predicted": self.today.to_dict(),
                      "measured": self.measured, "relative_error": self.errors()},
            "candidates": [{"set": as_set_flags(changes), "predicted": p.to_dict(), "alike_today": self.alike_today(p)}
                           for changes, p in self.candidates],
        }


def today_settings(observed: Observed, today: dict | None = None) -> Settings:
    """The settings recorded with the bundle; for an engine read from outside, its defaults with what its snapshot
    published and `today` (`--today FLAG=VALUE`: what the operator knows of its flags) on top."""
    if observed.engine_config:
        return Settings.recorded(observed.engine_config).changed(today or {})
    if not _spans(observed):
        raise UserError(f"{observed.source}: the bundle holds neither the engine's steps nor its requests' prefill "
                        f"intervals (recorded by an older stagelens?): record it again with `stagelens lab "
                        f"--record` or `stagelens record`")
    return Settings.assumed(*observed.engine_info(), longest=observed.longest_request).changed(today or {})


def _spans(observed: Observed) -> list[RequestTimeline]:
    return [t for t in observed.timelines if t.chunks]


def fitted(observed: Observed, settings: Settings | None = None) -> StepCost:
    """On the engine's own steps; without them (an engine read from outside), on its spans' intervals, a long
    prompt's prefill as the chunks today's budget cut it into (chunked prefill on)."""
    try:
        if observed.steps or observed.engine_config:
            return fit_steps(observed.steps, observed.loads)
        chunk = settings.max_num_batched_tokens if settings and settings.enable_chunked_prefill else None
        return fit_spans(_spans(observed), chunk)
    except FitError as exc:
        raise UserError(f"{observed.source}: {exc}") from None


def what_if(observed: Observed, candidates: list[dict], settings: Settings | None = None,
            cost: StepCost | None = None, scale_rate: float = 1.0, wider: Wider | None = None) -> WhatIf:
    """Today's prediction and each candidate's (changes: field -> value), on the observed requests arriving
    `scale_rate` times as fast. A prediction that leaves the recorded range is made again with the step cost
    widened by `wider` (the bundled engine's profile, or an outside engine's prior: agent/whatif/beyond.py),
    with a range where that is assumed. Bad values are a UserError."""
    settings = settings or today_settings(observed)
    checked = [(changes, settings.changed(changes)) for changes in candidates]    # refuse bad flags before work
    cost = cost or fitted(observed, settings)
    replayed = scaled(observed.requests, scale_rate)
    runs = [settings] + [s for _, s in checked]
    predictions = [predict(s, cost, replayed) for s in runs]
    if cost.beyond is None and any(p.simulation.log.steps_outside for p in predictions):
        widened = (wider or Wider()).widen(cost, observed)
        if widened is not None:
            cost = widened
            predictions = [predict(s, cost, replayed) for s in runs]
    if cost.beyond is not None and cost.beyond.spread > 1:
        for p in predictions:
            if p.extrapolated:
                p.bounds = predicted_range(p, cost, replayed)
    measured = serving_figures(observed.requests, observed.window)
    measured["kv_used_ratio_mean"] = observed.kv_used_ratio_mean
    return WhatIf(observed, cost, predictions[0], measured,
                  [(changes, p) for (changes, _), p in zip(checked, predictions[1:], strict=True)], replayed,
                  scale_rate)


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
    return (f"; a prefill over {c.cold_after_s:g} s after the last runs cold: {duration(warm + cold)} a "
            f"prompt token against {duration(warm)} warm")


def fit_terms(c: StepCost) -> str:
    """The fitted step cost in words and units."""
    k = c.coefficients
    parts = [f"{duration(k['fixed'])} a step", f"{duration(k['decode_seqs'])} a decoding sequence",
             f"{duration(k['prefill_tokens'])} a prompt token",
             f"{duration(k['kv_tokens'] * 1000)} a thousand KV tokens held"]
    if k["extra_forwards"]:
        parts.append(f"{duration(k['extra_forwards'])} a model beyond the first in a batch")
    seen = c.observed_max
    return (f"step cost: {', '.join(parts)}; fitted on batches up to {seen['decode_seqs']:.0f} decoding sequences "
            f"and {seen['prefill_tokens']:.0f} prompt tokens a step")


def beyond_lines(c: StepCost) -> list[str]:
    if c.beyond is None:
        return []
    lines = [f"past that: {line}" for line in c.beyond.describe()]
    if c.beyond_scale != 1:
        lines.append(f"  scaled by {c.beyond_scale:.2f}: the work past the recorded batches at that share of "
                     f"the datasheet's rates")
    return lines


def length_lines(w: WhatIf) -> list[str]:
    """Where max_model_len came from, for an engine read from outside, and the requests it leaves out or cuts
    (agent/whatif/predict.py `left_out`): the same for every candidate, which cannot change it."""
    settings, figures, total = w.today.settings, w.today.figures, len(w.observed.requests)
    longest = f"max_model_len ({settings.max_model_len} tokens)"
    lines = []
    if settings.read_from_outside:
        lines.append(f"an engine read from outside: {longest}; the longest request recorded held "
                     f"{w.observed.longest_request} tokens, prompt and output (--today max-model-len=N sets it)")
    if figures.get("requests_never_run"):
        lines.append(f"{figures['requests_never_run']} of {total} requests could never run: a prompt of {longest} "
                     f"or more, which the engine refuses; left out of every prediction")
    if figures.get("requests_cut_at_max_model_len"):
        lines.append(f"{figures['requests_cut_at_max_model_len']} of {total} requests cut at {longest}: their "
                     f"prompt and output are longer, and each is predicted to end there")
    return lines


def render(w: WhatIf) -> str:
    c = w.cost
    on = "steps" if w.observed.steps else "pseudo-steps from the requests' prefill and decode intervals"
    lines = [f"replayed {len(w.observed.requests)} requests of {w.observed.source}"
             + (f", arriving {w.scale_rate:g}x as fast" if w.scale_rate != 1 else ""), *length_lines(w),
             f"step cost fitted on {c.steps} {on}: median error {c.error_median:.0%}, p90 {c.error_p90:.0%}; "
             f"{c.loads} model loads seen" + _cold_note(c), fit_terms(c), *beyond_lines(c)]
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
        return (f"  ({share}, priced by the prior: P99 TTFT {_ms(low)} to {_ms(high)} if that part is off "
                f"by {c.beyond.spread:g}x either way)")
    return f"  ({share}, priced by the measured profile)"
