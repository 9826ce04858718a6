"""Small statistics the hooks and their readers share."""

from __future__ import annotations


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile, q in [0, 100]; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def latency_summary(quantiles: tuple[int, ...] = (50, 99), **series: list[float]) -> dict[str, float | None]:
    """The serving percentiles every surface shows, named alike: `latency_summary(ttft=[...],
    latency=[...])` is {"ttft_p50_s", "ttft_p99_s", "latency_p50_s", "latency_p99_s"}, in the
    order given; None for no values."""
    return {f"{name}_p{q}_s": percentile(values, q) for name, values in series.items() for q in quantiles}
