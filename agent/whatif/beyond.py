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

from stagelens.whatif.fit import FEATURES, duration, nonnegative_least_squares, relative_squares, step_rows

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
    other's slowdown. A step that prefills also costs the served engine a fixed time of its own
    (scheduling, sampling and the hooks around a prefill, which the bare forward the profile times
    lacks): left in the prefill's factor, it would price a prefill of 512 tokens by the slowdown
    of the recorded chunks of 64, a third too slow. Past the recorded range a step is priced by how
    much more it costs than the range's edge (agent/whatif/fit.py), which prefills too: the fixed
    time cancels there, and what it changes is the prefill's factor fitted beside it."""
    profile: ProfileCost
    steady_scale: float
    prefill_scale: float
    prefill_step_s: float = 0.0
    spread = 1.0            # measured: no range

    def seconds(self, prefill_tokens: float, prefill_pairs: float, decode_seqs: float,
                kv_tokens: float, forwards: float = 1) -> float:
        steady, prefill = self.profile.parts(prefill_tokens, prefill_pairs, decode_seqs, kv_tokens)
        fixed = self.prefill_step_s if prefill > 0 else 0.0
        return self.steady_scale * steady + self.prefill_scale * prefill + fixed

    def describe(self) -> list[str]:
        fixed = f", plus {duration(self.prefill_step_s)} a step that prefills" if self.prefill_step_s else ""
        return [*self.profile.describe(), f"scaled to this recording's steps: "
                f"{self.steady_scale:.2f} on a step's steady part (its base, decodes and KV read), "
                f"{self.prefill_scale:.2f} on its prefill{fixed}"]


# a part's own scale is fitted only with this many recorded steps that have it
MIN_STEPS_EACH = 5
# a prefill step's fixed time is told from its per-token slope only with this many recorded prefills
# at most SMALL_PREFILL of the median one's size (chunks all of one size leave the two as one), and
# kept only where it fits the steps better by FIXED_PART_GAIN
SMALL_PREFILL = 0.5
FIXED_PART_GAIN = 0.05


def calibrated(profile: ProfileCost, steps: list[dict], busy_gap: float) -> ScaledProfile | None:
    """The profile scaled to the recorded steps: least squares on the relative error of the two
    parts' factors (each >= 0), and a prefill step's fixed time where the recorded prefills' sizes
    tell it apart; a part too few recorded steps have (no prefill seen, or none without one) takes
    the busy-time ratio of all the steps."""
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
    return _with_prefill_step(ScaledProfile(profile, float(steady), float(prefill)), parts, y, prefilling)


def _with_prefill_step(scaled: ScaledProfile, parts: np.ndarray, y: np.ndarray,
                       prefilling: np.ndarray) -> ScaledProfile:
    """`scaled` with a prefill step's fixed time fitted beside the two factors, where the recorded
    prefills' sizes tell it from the per-token slope and it fits the steps better."""
    sizes = parts[prefilling, 1]
    if (sizes <= SMALL_PREFILL * np.median(sizes)).sum() < MIN_STEPS_EACH:
        return scaled
    design = np.column_stack([parts, prefilling.astype(float)])
    coef = nonnegative_least_squares(design, y, 1 / y)
    if coef[0] <= 0 or coef[1] <= 0 or coef[2] <= 0:
        return scaled
    two = np.array([scaled.steady_scale, scaled.prefill_scale, 0.0])
    if relative_squares(design, y, coef) > (1 - FIXED_PART_GAIN) * relative_squares(design, y, two):
        return scaled
    return ScaledProfile(scaled.profile, float(coef[0]), float(coef[1]), float(coef[2]))

