"""The step cost fitted on the steps an engine was seen to take: a step's time as a fixed part plus a part per
prefill token, per prefill token times its context (attention's quadratic part), per decoding sequence, per KV
slot reserved for the running sequences (the engine allocates and reads whole blocks: a sequence's last block
is paid for in full, and a contiguous allocator's whole reservation), per forward pass beyond the first (one
per model in the batch), and while a model load runs beside it.
Least squares with every coefficient kept at or above zero (a step never gets faster with more work), each
step weighted by one over the square root of its time (a few long prefills must not drown the many decode
steps), then scaled so that the steps' total time is the one observed (the busy time decides the queueing);
its error on the steps it was fitted on, and the range of batches it saw, go with it, so that a prediction
built on batches far outside that range says so.

A step's time is from its start to the next step's start while the engine stayed busy (the loop's own
work between steps is part of what a step costs), else to its end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FEATURES = ("fixed", "prefill_tokens", "prefill_pairs", "decode_seqs", "kv_slots", "extra_forwards", "loading")
# a batch past these is extrapolated; a forward beyond the most seen is too (no slack: models are few)
RANGED = ("prefill_tokens", "prefill_pairs", "decode_seqs", "kv_slots", "extra_forwards")
BUSY_GAP_S = 0.005           # a pause shorter than this between steps is the loop's work, not idleness
OUTSIDE_MARGIN = 1.25        # a batch this far past the largest seen is outside the fitted range
DEFAULT_LOAD_S = 1.0         # a model load's time when no load was seen


@dataclass
class StepCost:
    coefficients: dict[str, float]
    steps: int                                  # steps fitted on
    error_median: float                         # median |predicted - observed| / observed on those steps
    error_p90: float
    total_error: float                          # |sum predicted - sum observed| / sum observed: the busy time
    observed_max: dict[str, float]
    load_seconds: dict[str, float] = field(default_factory=dict)   # per model, the mean of its loads
    loads: int = 0

    def seconds(self, prefill_tokens: int, prefill_pairs: int, decode_seqs: int, kv_slots: int, loading: bool,
                forwards: int = 1) -> tuple[float, bool]:
        """(the step's predicted time, whether its batch lies outside the fitted range)."""
        c = self.coefficients
        t = (c["fixed"] + c["prefill_tokens"] * prefill_tokens + c["prefill_pairs"] * prefill_pairs
             + c["decode_seqs"] * decode_seqs + c["kv_slots"] * kv_slots
             + c["extra_forwards"] * max(0, forwards - 1) + (c["loading"] if loading else 0.0))
        m = self.observed_max
        outside = (prefill_tokens > OUTSIDE_MARGIN * m["prefill_tokens"] + 1
                   or prefill_pairs > OUTSIDE_MARGIN * m["prefill_pairs"] + 1
                   or decode_seqs > OUTSIDE_MARGIN * m["decode_seqs"] + 1
                   or kv_slots > OUTSIDE_MARGIN * m["kv_slots"] + 1
                   or forwards - 1 > m.get("extra_forwards", forwards))
        return t, outside

    def load_time(self, model: str) -> float:
        if model in self.load_seconds:
            return self.load_seconds[model]
        if self.load_seconds:
            return float(np.mean(list(self.load_seconds.values())))
        return DEFAULT_LOAD_S

    def to_dict(self) -> dict:
        return {"features": list(FEATURES), "coefficients": self.coefficients, "steps": self.steps,
                "error_median": self.error_median, "error_p90": self.error_p90, "total_error": self.total_error,
                "observed_max": self.observed_max, "load_seconds": self.load_seconds, "loads": self.loads}


class FitError(ValueError):
    """Too few steps to fit on."""


def step_rows(steps: list[dict], busy_gap: float = BUSY_GAP_S) -> tuple[np.ndarray, np.ndarray]:
    """(features, seconds) of each recorded step (agent/record.py STEP_FIELDS) that did some work; a step's time
    runs on to the next one's start when the pause between them is shorter than `busy_gap`."""
    ordered = sorted(steps, key=lambda s: s["start"])
    rows, times = [], []
    for i, s in enumerate(ordered):
        if not s["prefill_tokens"] and not s["decode_tokens"]:
            continue
        end = s["end"]
        if i + 1 < len(ordered) and 0 <= ordered[i + 1]["start"] - end < busy_gap:
            end = ordered[i + 1]["start"]
        rows.append((1.0, s["prefill_tokens"], s["prefill_pairs"], s["decode_seqs"], s["kv_slots_reserved"],
                     max(0, s["forwards"] - 1), 1.0 if s["loading"] else 0.0))
        times.append(end - s["start"])
    return np.asarray(rows, dtype=float).reshape(-1, len(FEATURES)), np.asarray(times, dtype=float)


def fit_steps(steps: list[dict], loads: list[dict] | None = None, busy_gap: float = BUSY_GAP_S) -> StepCost:
    x, y = step_rows(steps, busy_gap)
    if len(y) < len(FEATURES):
        raise FitError(f"{len(y)} engine steps recorded: too few to fit the step cost on (at least {len(FEATURES)})")
    y = np.maximum(y, 1e-6)
    coef = _nonnegative_least_squares(x, y, 1 / np.sqrt(y))
    if (x @ coef).sum() > 0:
        coef *= y.sum() / (x @ coef).sum()
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
        load_seconds={m: float(np.mean(v)) for m, v in per_model.items()}, loads=len(loads))


def _nonnegative_least_squares(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted least squares with the coefficients kept >= 0: refit without the most negative until none is."""
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        solution, *_ = np.linalg.lstsq(x[:, active] * weights[:, None], y * weights, rcond=None)
        if (solution >= 0).all():
            coef[active] = solution
            return coef
        active.pop(int(np.argmin(solution)))
    return coef
