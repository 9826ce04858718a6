"""What-if end to end on an observed run: the fit, today's prediction beside what was measured (the
fidelity check), and each candidate's prediction (agent/whatif/predict.py makes one);
`WhatIf.to_dict` is the `--json` document, agent/whatif/report.py the text."""

from __future__ import annotations

from dataclasses import dataclass

from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.errors import UserError
from stagelens.whatif.figures import COMPARED, alike, relative_error, serving_figures
from stagelens.whatif.fit import FitError, StepCost, fit_steps
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
    # the requests replayed: the observed ones, maybe arriving faster (`--scale-rate`)
    replayed: list
    scale_rate: float = 1.0

    def alike_today(self, prediction: Prediction) -> bool:
        """A candidate predicted as today: at this load its change binds nowhere the simulation
        can see."""
        return all(alike(self.today.figures.get(k), prediction.figures.get(k)) for k in ALIKE_FIGURES)

    def errors(self) -> dict:
        return {k: relative_error(self.today.figures.get(k), self.measured.get(k)) for k in COMPARED}

    def to_dict(self) -> dict:
        return {
            "source": self.observed.source,
            "requests": len(self.observed.requests), "scale_rate": self.scale_rate,
            "fit": {**self.cost.to_dict(),
                    "on": "steps" if self.observed.steps else "request intervals"},
            "today": {"settings": self.today.settings.__dict__, "predicted": self.today.to_dict(),
                      "measured": self.measured, "relative_error": self.errors()},
            "candidates": [{"set": as_set_flags(changes), "predicted": p.to_dict(),
                            "alike_today": self.alike_today(p)}
                           for changes, p in self.candidates],
        }


def today_settings(observed: Observed, today: dict | None = None) -> Settings:
    """The settings recorded with the bundle; for an engine read from outside, its defaults with
    what its snapshot published and `today` (`--today FLAG=VALUE`: what the operator knows of its
    flags) on top."""
    today = today or {}
    if observed.engine_config:
        return _with_today(Settings.recorded(observed.engine_config), today)
    if not _spans(observed):
        raise UserError(f"{observed.source}: the bundle holds neither the engine's steps nor its "
                        f"requests' prefill intervals (recorded by an older stagelens?): record it "
                        f"again with `stagelens lab --record` or `stagelens record`")
    assumed = Settings.assumed(*observed.engine_info(), longest=observed.longest_request,
                               told=today.get("max_model_len"))
    return _with_today(assumed, today)


def _with_today(settings: Settings, today: dict) -> Settings:
    """`settings` with `--today`'s flags, refused in words that name `--today`: the flag the engine
    names (`--kv-cache-memory` too small for a max_model_len) is not one the user gave."""
    try:
        return settings.changed(today)
    except UserError as exc:
        if not today:
            raise
        given = ",".join(f"{k}={v}" for k, v in as_set_flags(today).items())
        raise UserError(f"--today {given}: {exc}") from None


def _spans(observed: Observed) -> list[RequestTimeline]:
    return [t for t in observed.timelines if t.chunks]


def fitted(observed: Observed, settings: Settings | None = None) -> StepCost:
    """On the engine's own steps; without them (an engine read from outside), on its spans'
    intervals, a long prompt's prefill as the chunks today's budget cut it into (chunked prefill
    on)."""
    try:
        if observed.steps or observed.engine_config:
            return fit_steps(observed.steps, observed.loads)
        chunk = settings.max_num_batched_tokens if settings and settings.enable_chunked_prefill else None
        return fit_spans(_spans(observed), chunk)
    except FitError as exc:
        raise UserError(f"{observed.source}: {exc}") from None


def what_if(observed: Observed, candidates: list[dict], settings: Settings | None = None,
            cost: StepCost | None = None, scale_rate: float = 1.0, wider: Wider | None = None) -> WhatIf:
    """Today's prediction and each candidate's (changes: field -> value), on the observed
    requests arriving `scale_rate` times as fast. A prediction that leaves the recorded range is
    made again with the step cost widened by `wider` (the bundled engine's profile, or an outside
    engine's prior: agent/whatif/beyond.py), with a range where that is assumed. Bad values are a
    UserError."""
    settings = settings or today_settings(observed)
    # refuse bad flags before work
    checked = [(changes, settings.changed(changes)) for changes in candidates]
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
                  [(changes, p) for (changes, _), p in zip(checked, predictions[1:], strict=True)],
                  replayed, scale_rate)
