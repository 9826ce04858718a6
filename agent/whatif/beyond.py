"""How a step's time grows past the batches a recording saw. Inside the recorded range the step cost is the
one fitted on the recording's own steps (agent/whatif/fit.py); past it, that fit at the range's edge plus
how much more the larger batch costs by a wider source, scaled to the recording:

- the bundled engine's **profile** (agent/lab/step_profile.py): its real forward measured over a grid of
  batches, contexts and prefills, fitted here with a step time that is piecewise linear in the decoding
  sequences (a CPU's or GPU's matmul gets cheaper per row as the batch grows: one slope would price a batch
  of 128 from batches of 2), plus a part per KV token held, per prefill token and per prefill pair;
- for an engine read from outside, the **roofline prior** of the node's GPU (or this host, measured) and the
  model's shape (agent/whatif/prior.py): assumed, not measured, so its predictions carry a range.

The scale is the recording's busy time over what the wider source prices its steps at: the machine's speed
today (a busy host, the hooks, the engine's loop) against the profile's or the datasheet's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agent.whatif.fit import FEATURES, duration, nonnegative_least_squares, step_rows

DECODE_KNOTS = (0, 1, 4, 16, 48, 128)      # the profile's batches: one slope between each two


@dataclass(frozen=True)
class ProfileCost:
    """A step's time from the profile: a base, a slope per decoding sequence on each stretch between knots
    (each >= 0: more sequences never cost less), and parts per KV token, prefill token and prefill pair."""
    base: float
    slopes: tuple[float, ...]
    per_kv_token: float
    per_prefill_token: float
    per_prefill_pair: float
    steps: int
    error_median: float

    def seconds(self, prefill_tokens: float, prefill_pairs: float, decode_seqs: float, kv_tokens: float,
                forwards: float = 1) -> float:
        return (self.base + float(np.dot(self.slopes, _ramps(decode_seqs))) + self.per_kv_token * kv_tokens
                + self.per_prefill_token * prefill_tokens + self.per_prefill_pair * prefill_pairs)

    def describe(self) -> list[str]:
        def step(batch: int) -> str:
            return f"{duration(self.seconds(0, 0, batch, 0))} at {batch}"

        return [f"measured: the bundled engine's profile ({self.steps} steps, median error "
                f"{self.error_median:.0%}): a decode step takes " + ", ".join(step(b) for b in (1, 16, 128))
                + f" sequences; a prompt token {duration(self.per_prefill_token)}"]

    spread = 1.0            # measured: no range


def _ramps(decode_seqs: float) -> np.ndarray:
    """How far `decode_seqs` runs into each stretch between knots (the last stretch open-ended)."""
    lows = np.asarray(DECODE_KNOTS[:-1], dtype=float)
    widths = np.diff(np.asarray(DECODE_KNOTS, dtype=float))
    ramps = np.clip(decode_seqs - lows, 0.0, widths)
    ramps[-1] = max(0.0, decode_seqs - lows[-1])
    return ramps


def fit_profile(steps: list[dict]) -> ProfileCost:
    """The profile's steps (agent/lab/step_profile.py) fitted: least squares on the relative error, every
    part >= 0."""
    x, y = step_rows(steps, busy_gap=0.0)
    decode, kv, prefill, pairs = (x[:, FEATURES.index(name)] for name in
                                  ("decode_seqs", "kv_tokens", "prefill_tokens", "prefill_pairs"))
    features = np.column_stack([np.ones(len(y)), *np.array([_ramps(d) for d in decode]).T, kv, prefill, pairs])
    y = np.maximum(y, 1e-6)
    coef = nonnegative_least_squares(features, y, 1 / y)
    rel = np.abs(features @ coef - y) / y
    knots = len(DECODE_KNOTS) - 1
    return ProfileCost(base=float(coef[0]), slopes=tuple(float(c) for c in coef[1:1 + knots]),
                       per_kv_token=float(coef[1 + knots]), per_prefill_token=float(coef[2 + knots]),
                       per_prefill_pair=float(coef[3 + knots]), steps=len(y), error_median=float(np.median(rel)))


def scale_to(source, steps: list[dict], busy_gap: float) -> float | None:
    """The recorded steps' busy time over the time `source` prices them at (None: nothing to scale by)."""
    x, y = step_rows(steps, busy_gap)
    if not len(y):
        return None
    at = {name: FEATURES.index(name) for name in FEATURES}
    priced = sum(source.seconds(r[at["prefill_tokens"]], r[at["prefill_pairs"]], r[at["decode_seqs"]],
                                r[at["kv_tokens"]], 1 + r[at["extra_forwards"]]) for r in x)
    return float(y.sum() / priced) if priced > 0 else None
