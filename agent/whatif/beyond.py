"""How a step's time grows past the batches a recording saw. Inside the recorded range the step cost
is the one fitted on the recording's own steps (agent/whatif/fit.py); past it, that fit at the
range's edge plus how much more the larger batch costs by a wider source, scaled to the recording:

- the bundled engine's **profile** (agent/lab/step_profile.py): its real forward measured over a
  grid of
  batches, contexts and prefills, fitted here with a step time that is piecewise linear in the
  decoding sequences (a CPU's or GPU's matmul gets cheaper per row as the batch grows: one slope
  would price a batch of 128 from batches of 2), plus a part per KV token held, per prefill token
  and per prefill pair;
- for an engine read from outside, the **roofline prior** of the node's GPU (or this host, measured)
  and the
  model's shape (agent/whatif/prior.py): assumed, not measured, so its predictions carry a range.

The scale is the recording's busy time over what the wider source prices its steps at: the machine's
speed today (a busy host, the hooks, the engine's loop) against the profile's or the datasheet's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stagelens.whatif.fit import FEATURES, duration, nonnegative_least_squares, step_rows

# the profile's batches and prefill sizes: one slope between each two knots, the last running on. A
# CPU's or GPU's matmul gets cheaper per row as rows grow, so a decode step of 128 sequences, or a
# prefill of 4,096 tokens, is priced by its own stretch, not by one slope fitted over all sizes
DECODE_KNOTS = (0, 1, 4, 16, 48, 128)
PREFILL_KNOTS = (0, 32, 128, 512, 2048, 8192)


@dataclass(frozen=True)
class ProfileCost:
    """A step's time from the profile: a base, a slope per decoding sequence and one per prefill
    token on each stretch between knots (each >= 0: more work never costs less), and parts per KV
    token and prefill pair."""
    base: float
    decode_slopes: tuple[float, ...]
    prefill_slopes: tuple[float, ...]
    per_kv_token: float
    per_prefill_pair: float
    steps: int
    error_median: float

    def seconds(self, prefill_tokens: float, prefill_pairs: float, decode_seqs: float,
                kv_tokens: float, forwards: float = 1) -> float:
        return sum(self.parts(prefill_tokens, prefill_pairs, decode_seqs, kv_tokens))

    def parts(self, prefill_tokens: float, prefill_pairs: float, decode_seqs: float,
              kv_tokens: float) -> tuple[float, float]:
        """(the step's steady part: its base, decodes and KV read; its prefill part: tokens and
        pairs)."""
        return (self.base + _piecewise(decode_seqs, DECODE_KNOTS, self.decode_slopes) + self.per_kv_token * kv_tokens,
                _piecewise(prefill_tokens, PREFILL_KNOTS, self.prefill_slopes) + self.per_prefill_pair * prefill_pairs)

    def describe(self) -> list[str]:
        def decode(batch: int) -> str:
            return f"{duration(self.seconds(0, 0, batch, 0))} at {batch}"

        def prefill(tokens: int) -> str:
            return f"{duration(self.seconds(tokens, 0, 0, 0) - self.base)} for {tokens:,}"

        return [f"measured: the bundled engine's profile ({self.steps} steps, median error "
                f"{self.error_median:.0%}): a decode "
                f"step takes " + ", ".join(decode(b) for b in (1, 16, 128))
                + " sequences; a prefill " + ", ".join(prefill(t) for t in (64, 512, 4096)) + " tokens more"]

    spread = 1.0            # measured: no range


def _piecewise(value: float, knots: tuple[int, ...], slopes: tuple[float, ...]) -> float:
    """The slopes over the stretches `value` runs through (runs once a simulated step: no numpy)."""
    total = 0.0
    for low, high, slope in zip(knots[:-1], (*knots[1:-1], float("inf")), slopes, strict=True):
        if value <= low:
            break
        total += slope * (min(value, high) - low)
    return total


def _ramps(values: np.ndarray, knots: tuple[int, ...]) -> np.ndarray:
    """How far each value runs into each stretch between knots (the last open-ended): one column
    a stretch."""
    lows = np.asarray(knots[:-1], dtype=float)
    widths = np.append(np.diff(np.asarray(knots, dtype=float))[:-1], np.inf)
    return np.clip(values[:, None] - lows[None, :], 0.0, widths[None, :])


def fit_profile(steps: list[dict]) -> ProfileCost:
    """The profile's steps (agent/lab/step_profile.py) fitted: least squares on the relative
    error, every part >= 0."""
    x, y = step_rows(steps, busy_gap=0.0)
    decode, prefill, kv, pairs = (x[:, FEATURES.index(name)] for name in
                                  ("decode_seqs", "prefill_tokens", "kv_tokens", "prefill_pairs"))
    features = np.column_stack([np.ones(len(y)), _ramps(decode, DECODE_KNOTS),
                                _ramps(prefill, PREFILL_KNOTS), kv, pairs])
    y = np.maximum(y, 1e-6)
    coef = nonnegative_least_squares(features, y, 1 / y)
    rel = np.abs(features @ coef - y) / y
    d, p = len(DECODE_KNOTS) - 1, len(PREFILL_KNOTS) - 1
    return ProfileCost(base=float(coef[0]), decode_slopes=tuple(float(c) for c in coef[1:1 + d]),
                       prefill_slopes=tuple(float(c) for c in coef[1 + d:1 + d + p]),
                       per_kv_token=float(coef[1 + d + p]), per_prefill_pair=float(coef[2 + d + p]),
                       steps=len(y), error_median=float(np.median(rel)))


@dataclass(frozen=True)
class ScaledProfile:
    """The profile scaled to a recording, its steady part and its prefill part each by its own
    factor: the engine served beside a load generator and an agent slows down more on a long
    prefill (its matmuls share the cores) than on a decode step (mostly the loop's own work), so
    one factor fitted on a mix of both would price a larger prefill, or a larger batch, by the
    other's slowdown."""
    profile: ProfileCost
    steady_scale: float
    prefill_scale: float
    spread = 1.0            # measured: no range

    def seconds(self, prefill_tokens: float, prefill_pairs: float, decode_seqs: float,
                kv_tokens: float, forwards: float = 1) -> float:
        steady, prefill = self.profile.parts(prefill_tokens, prefill_pairs, decode_seqs, kv_tokens)
        return self.steady_scale * steady + self.prefill_scale * prefill

    def describe(self) -> list[str]:
        return [*self.profile.describe(), f"scaled to this recording's steps: "
                f"{self.steady_scale:.2f} on a step's steady part (its base, decodes and KV read), "
                f"{self.prefill_scale:.2f} on its prefill"]


# a part's own scale is fitted only with this many recorded steps that have it
MIN_STEPS_EACH = 5


def calibrated(profile: ProfileCost, steps: list[dict], busy_gap: float) -> ScaledProfile | None:
    """The profile scaled to the recorded steps: least squares on the relative error of the two
    parts' factors (each >= 0); a part too few recorded steps have (no prefill seen, or none
    without one) takes the busy-time ratio of all the steps."""
    x, y = step_rows(steps, busy_gap)
    if not len(y):
        return None
    at = {name: FEATURES.index(name) for name in FEATURES}
    parts = np.array([profile.parts(r[at["prefill_tokens"]], r[at["prefill_pairs"]],
                                    r[at["decode_seqs"]], r[at["kv_tokens"]]) for r in x])
    overall = float(y.sum() / parts.sum()) if parts.sum() > 0 else 1.0
    prefilling = parts[:, 1] > 0
    if min(prefilling.sum(), (~prefilling).sum()) < MIN_STEPS_EACH:
        return ScaledProfile(profile, overall, overall)
    y = np.maximum(y, 1e-6)
    steady, prefill = nonnegative_least_squares(parts, y, 1 / y)
    if steady <= 0 or prefill <= 0:
        return ScaledProfile(profile, overall, overall)
    return ScaledProfile(profile, float(steady), float(prefill))
