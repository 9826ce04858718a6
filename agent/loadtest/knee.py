"""The first knee of a curve, as a pure function: where raising the load stops paying.

Three rules, checked point by point against the point before:
- throughput gain: less than `gain_threshold` per `step` of added load (5% per 10% by default). A
  step
  of another size scales the bar by elasticity: doubling the load must gain 2 ** (ln 1.05 / ln 1.1)
  - 1 ≈ 43%. Only for numeric, rising loads; for settings that are not a load (a block size, a
  switch) pass None.
- P99 jump: P99 more than `p99_factor` times the point before.
- P99 SLA: P99 above an absolute bound. A gain or jump rule that trips is confirmed by the next
  point when there is one: if the next point is back on course against the point before the trip,
  the trip was noise and the search goes on. A trip at the last point cannot be confirmed; it is
  reported with `confirmed=False` (stress runs one step more). The SLA is absolute: its first breach
  is the knee.

The knee is the last good point (`index`); `past_index` is the first point past it, where the rule
tripped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from stagelens.loadtest.point import Point


@dataclass
class Knee:
    # the last good point; None when the first point already breaks the SLA
    index: int | None
    past_index: int            # the first point past the knee
    rules: list[str]           # throughput_gain | p99_jump | p99_sla
    reason: str
    confirmed: bool = True

    def to_dict(self, points: Sequence[Point] | None = None) -> dict:
        out = {"index": self.index, "past_index": self.past_index, "rules": self.rules,
               "reason": self.reason, "confirmed": self.confirmed}
        if points is not None:
            out["value"] = points[self.index].value if self.index is not None else None
            out["past_value"] = points[self.past_index].value
            out["past_stage"] = points[self.past_index].stage
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Knee:
        return cls(data.get("index"), data["past_index"], list(data.get("rules") or []),
                   data.get("reason", ""), bool(data.get("confirmed", True)))


def _numeric(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def required_gain(x0, x1, gain_threshold: float, step: float = 0.10) -> float:
    """Throughput ratio that going from load x0 to x1 must reach: (x1/x0) ** (ln(1+g) /
    ln(1+step))."""
    if not (_numeric(x0) and _numeric(x1)) or x1 <= x0:
        return 1.0 + gain_threshold
    return (x1 / x0) ** (math.log1p(gain_threshold) / math.log1p(step))


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.0f}%"


def _gain_fails(points, base: int, i: int, gain_threshold: float, step: float) -> tuple[bool, str]:
    t0, t1 = points[base].throughput_tokens_per_s, points[i].throughput_tokens_per_s
    if not t0 or t0 <= 0:
        return False, ""
    need = required_gain(points[base].value, points[i].value, gain_threshold, step)
    got = (t1 or 0.0) / t0
    return got < need, f"throughput {t0:.0f} → {t1:.0f} tokens/s ({_pct(got)}, below the {_pct(need)} needed)"


def _jump_fails(points, base: int, i: int, factor: float, metric: str) -> tuple[bool, str]:
    p0, p1 = points[base].p99(metric), points[i].p99(metric)
    if p0 is None or p1 is None or p0 <= 0:
        return False, ""
    return p1 > factor * p0, f"P99 {_ms(p0)} → {_ms(p1)} (×{p1 / p0:.1f}, past ×{factor:g})"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def find_knee(points: Sequence[Point], gain_threshold: float | None = 0.05,
              p99_factor: float | None = 1.5, p99_sla: float | None = None, step: float = 0.10,
              metric: str = "latency") -> Knee | None:
    """The first knee of `points` (in the order run), or None when the curve has none."""
    for i, point in enumerate(points):
        p99 = point.p99(metric)
        if p99_sla is not None and p99 is not None and p99 > p99_sla:
            where = "already at the first point" if i == 0 else f"at {points[i].value}"
            return Knee(i - 1 if i else None, i, ["p99_sla"],
                        f"P99 {_ms(p99)} breaks the {_ms(p99_sla)} SLA {where}")
        if i == 0:
            continue
        rules, reasons, confirmed = [], [], True
        checks = []
        if gain_threshold is not None:
            checks.append(("throughput_gain", lambda b, j: _gain_fails(points, b, j, gain_threshold, step)))
        if p99_factor is not None:
            checks.append(("p99_jump", lambda b, j: _jump_fails(points, b, j, p99_factor, metric)))
        for rule, check in checks:
            fails, why = check(i - 1, i)
            if not fails:
                continue
            if i + 1 < len(points):
                if not check(i - 1, i + 1)[0]:
                    continue         # the next point is back on course: noise
            else:
                confirmed = False
            rules.append(rule)
            reasons.append(why)
        if rules:
            if not confirmed:
                reasons.append("at the last point, not confirmed by a further one")
            return Knee(i - 1, i, rules, "; ".join(reasons), confirmed)
    return None
