"""The step cost fitted on the steps an engine was seen to take: a step's time as a fixed part plus
a part per prefill token (more for a prefill that comes long after the last one: a CPU runs it
cold), per prefill token times its context (attention's quadratic part), per decoding sequence, per
KV token the running sequences hold (what the attention reads, whatever the allocator reserved), per
forward pass beyond the first (one per model in the batch), and while a model load runs beside it.
Least squares on the relative error (each step weighted by one over its time: a few long prefills
must not drown the many decode steps), every coefficient kept at or above zero (a step never gets
faster with more work), then scaled so that the steps' total time is the one observed (the busy time
decides the queueing); its error on the steps it was fitted on, and the range of batches it saw, go
with it, so that a prediction built on batches far outside that range says so.

A step's time is from its start to the next step's start while the engine stayed busy (the loop's
own work between steps is part of what a step costs), else to its end. How long after the last
prefill a prefill runs cold is chosen among COLD_PREFILL_CHOICES_S by the fit's error on the
observed steps.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

FEATURES = ("fixed", "prefill_tokens", "cold_prefill_tokens", "prefill_pairs", "decode_seqs",
            "kv_tokens", "extra_forwards", "loading")
# a batch past these is extrapolated; a forward beyond the most seen is too (no slack: models are
# few)
RANGED = ("prefill_tokens", "prefill_pairs", "decode_seqs", "kv_tokens", "extra_forwards")
# a pause shorter than this between steps is the loop's work, not idleness
BUSY_GAP_S = 0.005
# a prefill this long after the last one may run cold: the
COLD_PREFILL_CHOICES_S = (0.25, 0.5, 1.0, 2.0)
# threshold that fits the observed steps best is kept (docs/whatif.md)
# a threshold is tried only with this many cold prefills and as many warm ones
MIN_PREFILLS_EACH = 5
OUTSIDE_MARGIN = 1.25        # a batch this far past the largest seen is outside the fitted range
DEFAULT_LOAD_S = 1.0         # a model load's time when no load was seen


@dataclass
class StepCost:
    coefficients: dict[str, float]
    steps: int                                  # steps fitted on
    # median |predicted - observed| / observed on those steps
    error_median: float
    error_p90: float
    # |sum predicted - sum observed| / sum observed: the busy time
    total_error: float
    observed_max: dict[str, float]
    # per model, its loads' times as seen
    load_seconds: dict[str, list[float]] = field(default_factory=dict)
    loads: int = 0
    cold_after_s: float | None = None           # a prefill this long after the last one runs cold
    # past the recorded range: a wider source of step times (agent/whatif/beyond.py), and the factor
    # that scales it to the recorded steps
    beyond: object | None = None
    beyond_scale: float = 1.0
    # from a step's end to its tokens reaching the spans, as seen (an engine read from outside:
    # agent/whatif/spans.py)
    output_lags_s: tuple[float, ...] = ()

    def seconds(self, prefill_tokens: int, prefill_pairs: int, decode_seqs: int, kv_tokens: int, loading: bool,
                forwards: int = 1, since_prefill_s: float = 0.0) -> tuple[float, bool]:
        """(the step's predicted time, whether its batch lies outside the fitted range);
        `since_prefill_s`: from the end of the last step that prefilled to this one's start. With
        `beyond`, a batch past the recorded range costs the fit at the range's edge plus what
        `beyond` says the rest adds."""
        if self.beyond is not None:
            m = self.observed_max
            edge = (min(prefill_tokens, m["prefill_tokens"]),
                    min(prefill_pairs, m["prefill_pairs"]), min(decode_seqs, m["decode_seqs"]),
                    min(kv_tokens, m["kv_tokens"]))
            if edge != (prefill_tokens, prefill_pairs, decode_seqs, kv_tokens):
                more = (self.beyond.seconds(prefill_tokens, prefill_pairs, decode_seqs, kv_tokens,
                                            forwards)
                        - self.beyond.seconds(*edge, forwards))
                return (self._fitted(*edge, loading, forwards, since_prefill_s) + self.beyond_scale * max(0.0, more),
                        self._outside(prefill_tokens, prefill_pairs, decode_seqs, kv_tokens,
                                      forwards))
        return (self._fitted(prefill_tokens, prefill_pairs, decode_seqs, kv_tokens, loading,
                             forwards, since_prefill_s),
                self._outside(prefill_tokens, prefill_pairs, decode_seqs, kv_tokens, forwards))

    def _fitted(self, prefill_tokens, prefill_pairs, decode_seqs, kv_tokens, loading: bool,
                forwards: int, since_prefill_s: float) -> float:
        c = self.coefficients
        cold = self.cold_after_s is not None and since_prefill_s > self.cold_after_s
        t = (c["fixed"] + c["prefill_tokens"] * prefill_tokens + c["prefill_pairs"] * prefill_pairs
             + c["decode_seqs"] * decode_seqs + c["kv_tokens"] * kv_tokens
             + c["extra_forwards"] * max(0, forwards - 1) + (c["loading"] if loading else 0.0)
             + (c["cold_prefill_tokens"] * prefill_tokens if cold else 0.0))
        return t

    def _outside(self, prefill_tokens, prefill_pairs, decode_seqs, kv_tokens, forwards: int) -> bool:
        """Whether the batch lies past the fitted range by more than OUTSIDE_MARGIN."""
        m = self.observed_max
        return (prefill_tokens > OUTSIDE_MARGIN * m["prefill_tokens"] + 1
                or prefill_pairs > OUTSIDE_MARGIN * m["prefill_pairs"] + 1
                or decode_seqs > OUTSIDE_MARGIN * m["decode_seqs"] + 1
                or kv_tokens > OUTSIDE_MARGIN * m["kv_tokens"] + 1
                or forwards - 1 > m.get("extra_forwards", forwards))

    def load_time(self, model: str, nth: int = 0) -> float:
        """The time of `model`'s load number `nth` (from 0) in a replay: what its load of that
        number took when seen, so that a first load's slowness and the loads' spread replay as
        they were (a mean would make every load a typical one too slow and a slow one too fast);
        past the loads seen, those after its first again, in turn. A model never seen loaded: the
        mean of all the loads seen."""
        seen = self.load_seconds.get(model)
        if seen:
            if nth < len(seen):
                return seen[nth]
            again = seen[1:] or seen
            return again[(nth - len(seen)) % len(again)]
        pooled = [s for times in self.load_seconds.values() for s in times]
        return float(np.mean(pooled)) if pooled else DEFAULT_LOAD_S

    def with_beyond(self, source, scale: float) -> StepCost:
        """This cost with `source` pricing what lies past the recorded range, scaled by `scale`."""
        return dataclasses.replace(self, beyond=source, beyond_scale=scale)

    def to_dict(self) -> dict:
        return {"features": list(FEATURES), "coefficients": self.coefficients, "steps": self.steps,
                "error_median": self.error_median, "error_p90": self.error_p90, "total_error": self.total_error,
                "observed_max": self.observed_max, "load_seconds": self.load_seconds, "loads": self.loads,
                "cold_after_s": self.cold_after_s,
                "output_lag_median_s": sorted(self.output_lags_s)[len(self.output_lags_s) // 2]
                if self.output_lags_s else 0.0,
                "beyond": None if self.beyond is None else {"describe": self.beyond.describe(),
                                                            "scale": self.beyond_scale}}


class FitError(ValueError):
    """Too few steps to fit on."""


def step_rows(steps: list[dict], busy_gap: float = BUSY_GAP_S,
              cold_after: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(features, seconds) of each recorded step (agent/bundle.py STEP_FIELDS) that did some
    work; a step's time runs on to the next one's start when the pause between them is shorter
    than `busy_gap`. A prefill more than `cold_after` after the end of the last step that
    prefilled is cold (None: the steps are not a sequence)."""
    ordered = sorted(steps, key=lambda s: s["start"])
    rows, times = [], []
    last_prefill_end = -np.inf
    for i, s in enumerate(ordered):
        if not s["prefill_tokens"] and not s["decode_tokens"]:
            continue
        end = s["end"]
        if i + 1 < len(ordered) and 0 <= ordered[i + 1]["start"] - end < busy_gap:
            end = ordered[i + 1]["start"]
        cold = cold_after is not None and s["prefill_tokens"] and s["start"] - last_prefill_end > cold_after
        if s["prefill_tokens"]:
            last_prefill_end = s["end"]
        rows.append((1.0, s["prefill_tokens"], s["prefill_tokens"] if cold else 0.0,
                     s["prefill_pairs"], s["decode_seqs"], s["kv_tokens_cached"],
                     max(0, s["forwards"] - 1), 1.0 if s["loading"] else 0.0))
        times.append(end - s["start"])
    return np.asarray(rows, dtype=float).reshape(-1, len(FEATURES)), np.asarray(times, dtype=float)


def fit_steps(steps: list[dict], loads: list[dict] | None = None, busy_gap: float = BUSY_GAP_S,
              sequential: bool = True) -> StepCost:
    """The step cost of these steps; `sequential`: they are one engine's steps in order, so a
    prefill long after the last can be told from the others (the cold threshold of
    COLD_PREFILL_CHOICES_S that fits best)."""
    fits = [(None, _fit(steps, busy_gap, None))]
    if sequential:
        tried = [(t, _fit(steps, busy_gap, t)) for t in COLD_PREFILL_CHOICES_S]
        fits += [(t, fit) for t, fit in tried if _tells_cold_from_warm(fit[0])]
    cold_after, (x, y, coef) = min(fits, key=lambda fitted: relative_squares(*fitted[1]))
    predicted = x @ coef
    rel = np.abs(predicted - y) / np.maximum(y, 1e-9)
    loads = [ld for ld in loads or [] if ld.get("ok", True)]
    per_model: dict[str, list[float]] = {}
    for ld in loads:
        per_model.setdefault(ld["model"], []).append(float(ld["seconds"]))
    return StepCost(
        coefficients=dict(zip(FEATURES, (float(c) for c in coef), strict=True)),
        steps=len(y), error_median=float(np.median(rel)), error_p90=float(np.percentile(rel, 90)),
        total_error=float(abs(predicted.sum() - y.sum()) / y.sum()) if y.sum() > 0 else 0.0,
        observed_max={name: float(x[:, i].max()) for i, name in enumerate(FEATURES) if name in RANGED},
        load_seconds=per_model, loads=len(loads), cold_after_s=cold_after)


def _fit(steps: list[dict], busy_gap: float, cold_after: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, y = step_rows(steps, busy_gap, cold_after)
    if len(y) < len(FEATURES):
        raise FitError(f"{len(y)} engine steps recorded: too few to fit the step cost on (at least {len(FEATURES)})")
    y = np.maximum(y, 1e-6)
    coef = nonnegative_least_squares(x, y, _weights(y))
    if (x @ coef).sum() > 0:
        coef *= y.sum() / (x @ coef).sum()
    return x, y, coef


def _tells_cold_from_warm(x: np.ndarray) -> bool:
    """Enough prefills on each side of the threshold: with all of them cold (or warm) the two
    prefill terms are one, and the fit would split it between them at random."""
    prefills = x[:, FEATURES.index("prefill_tokens")] > 0
    cold = x[:, FEATURES.index("cold_prefill_tokens")] > 0
    return min(cold.sum(), (prefills & ~cold).sum()) >= MIN_PREFILLS_EACH


def _weights(y: np.ndarray) -> np.ndarray:
    return 1 / y


def relative_squares(x: np.ndarray, y: np.ndarray, coef: np.ndarray) -> float:
    """The sum of the squared relative errors of `x @ coef` against `y`: what the fits minimise."""
    return float((((x @ coef - y) * _weights(y)) ** 2).sum())


def nonnegative_least_squares(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted least squares with the coefficients kept >= 0: refit without the most negative
    until none is."""
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        solution, *_ = np.linalg.lstsq(x[:, active] * weights[:, None], y * weights, rcond=None)
        if (solution >= 0).all():
            coef[active] = solution
            return coef
        active.pop(int(np.argmin(solution)))
    return coef


def duration(seconds: float) -> str:
    """A step cost's part for a person: 11.2 ms, 240 µs, 3 ns; 0 as 0."""
    if seconds <= 0:
        return "0"
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"
