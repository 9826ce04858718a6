"""Reading figures off one scrape's families, and off the change between two scrapes.

Label sets are added up (vLLM's `engine` label, one per data-parallel engine; SGLang's data-parallel
ranks, once its tensor- and pipeline-parallel copies are set aside by `without_rank_copies`); ratios
are averaged over them. Counters and histograms are read as deltas between two scrapes; a counter
that went down (the engine restarted) counts from zero. Quantiles come from the window's bucket
counts, as Prometheus's `histogram_quantile` does, where the buckets place them; `quantile_said`
says the bound where they do not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stagelens.sources.scrape.prometheus_text import Family, Sample

# Labels that tell apart copies of one scheduler's figures: SGLang publishes them from every tensor-
# and pipeline-parallel rank (and each rank's process id); its data-parallel ranks are separate
# schedulers.
RANK_COPIES = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "pid"})


def values(family: Family | None, suffix: str = "") -> list:
    """The finite samples of the family named `family.name + suffix` (or `_total` for a counter)."""
    if family is None:
        return []
    names = {family.name + suffix}
    if family.type == "counter" and not suffix:
        names.add(family.name + "_total")
    return [s for s in family.samples if s.name in names and math.isfinite(s.value)]


def without_rank_copies(family: Family) -> Family:
    """The family with one sample (the largest) per label set that differs only in RANK_COPIES:
    adding up the copies would count every request once per tensor-parallel rank."""
    kept: dict[tuple, Sample] = {}
    for s in family.samples:
        key = (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in RANK_COPIES)))
        if key not in kept or s.value > kept[key].value:
            kept[key] = s
    return Family(family.name, family.type, tuple(kept.values()))


def total(family: Family | None) -> float | None:
    """The family's value added up over its label sets; None when it is absent."""
    samples = values(family)
    return sum(s.value for s in samples) if samples else None


def mean(family: Family | None) -> float | None:
    """A ratio's mean over label sets (each data-parallel engine has its own KV pool of the same
    size)."""
    samples = values(family)
    return sum(s.value for s in samples) / len(samples) if samples else None


def label(family: Family | None, name: str) -> str | None:
    """The first non-empty value of label `name` among the family's samples."""
    for s in values(family):
        if s.labels.get(name):
            return s.labels[name]
    return None


def by_label(family: Family | None, name: str) -> dict[str, float] | None:
    """The family's values added up by the value of label `name`."""
    samples = values(family)
    if not samples:
        return None
    out: dict[str, float] = {}
    for s in samples:
        key = s.labels.get(name, "")
        out[key] = out.get(key, 0.0) + s.value
    return out


def counter_delta(now: Family | None, before: Family | None) -> float | None:
    """The counter's increase between two scrapes; None without both; a reset counts from zero."""
    total_now, total_before = total(now), total(before)
    if total_now is None or total_before is None:
        return None
    return total_now - total_before if total_now >= total_before else total_now


@dataclass(frozen=True, slots=True)
class HistogramDelta:
    buckets: list[tuple[float, float]]     # (upper bound, cumulative count), ascending, +Inf last
    count: float
    sum: float


def histogram_part(family: Family | None, suffix: str) -> float | None:
    """A histogram's `_sum` or `_count` added up over its label sets; None when it is absent."""
    found = values(family, suffix) if family is not None and family.type == "histogram" else []
    return sum(s.value for s in found) if found else None


def highest_bound(family: Family | None) -> float | None:
    """The lowest bucket bound every observation of a histogram lies under (inf when some lie
    past its last finite bound); None without observations."""
    found = _cumulative(family)
    if found is None or found[1] <= 0:
        return None
    buckets, count = found[0], found[1]
    return min((le for le, c in buckets.items() if c >= count), default=math.inf)


def length_biased_mean(family: Family | None) -> float | None:
    """E[L^2] / E[L] of a histogram's observations, each taken at its bucket's middle (the last
    finite bound past it): the mean length of one found in progress at a random moment, since a
    long one is in progress for longer (the inspection paradox); None without observations."""
    found = _cumulative(family)
    if found is None or found[1] <= 0:
        return None
    lower = linear = squares = below = 0.0
    for le in sorted(found[0]):
        count, below = found[0][le] - below, found[0][le]
        middle = lower if math.isinf(le) else (lower + le) / 2
        linear += count * middle
        squares += count * middle * middle
        lower = lower if math.isinf(le) else le
    return squares / linear if linear > 0 else None


def _cumulative(family: Family | None) -> tuple[dict[float, float], float, float] | None:
    if family is None or family.type != "histogram":
        return None
    buckets: dict[float, float] = {}
    for s in values(family, "_bucket"):
        bound = float(s.labels["le"])
        buckets[bound] = buckets.get(bound, 0.0) + s.value
    if math.inf not in buckets:
        return None
    count = histogram_part(family, "_count")
    return buckets, buckets[math.inf] if count is None else count, histogram_part(family, "_sum") or 0.0


def histogram_delta(now: Family | None, before: Family | None) -> HistogramDelta | None:
    """Observations between two scrapes; None without both or when the buckets changed (a restart
    with other buckets); a reset (counts went down) counts from zero."""
    a, b = _cumulative(now), _cumulative(before)
    if a is None or b is None or set(a[0]) != set(b[0]):
        return None
    base = ({k: 0.0 for k in b[0]}, 0.0, 0.0) if a[1] < b[1] else b
    buckets = sorted((le, a[0][le] - base[0][le]) for le in a[0])
    return HistogramDelta(buckets, a[1] - base[1], a[2] - base[2])


def quantile(h: HistogramDelta | None, q: float) -> float | None:
    """The q-quantile of the window's observations, interpolated within its bucket as
    Prometheus's histogram_quantile does; None without observations, and None where interpolating
    would make a number up: in a first bucket that starts at zero (vLLM's queue time: (0, 0.3 s],
    where the mean can be 50 us) and past the last finite bound (SGLang's TTFT clamped to 30 s).
    `quantile_said` says what is known there."""
    bucket = quantile_bucket(h, q)
    if bucket is None or bucket[0] <= 0 or math.isinf(bucket[1]):
        return None
    return quantile_interpolated(h, q)


def quantile_interpolated(h: HistogramDelta | None, q: float) -> float | None:
    """The q-quantile interpolated as histogram_quantile does, in any bucket (the highest finite
    bound past it): a working estimate for an internal bound (the longest step, from the
    inter-token latency), never a figure reported as measured."""
    bucket = quantile_bucket(h, q)
    if bucket is None:
        return None
    lower, upper, rank, below, cumulative = bucket
    if math.isinf(upper):
        return lower
    return lower + (upper - lower) * (rank - below) / (cumulative - below)


def quantile_said(h: HistogramDelta | None, q: float) -> str | None:
    """The q-quantile in words, in seconds, as far as the buckets place it: "< 0.3 s" in a first
    bucket from zero, ">= 30 s" past the last finite bound, else the interpolated value; None
    without observations."""
    bucket = quantile_bucket(h, q)
    if bucket is None:
        return None
    lower, upper = bucket[:2]
    if lower <= 0:
        return f"< {upper:g} s"
    if math.isinf(upper):
        return f">= {lower:g} s"
    return f"{quantile(h, q):.3g} s"


def histogram_mean(h: HistogramDelta | None) -> float | None:
    """The window's mean observation (its _sum over its _count); None without observations."""
    return h.sum / h.count if h is not None and h.count > 0 else None


def quantile_bounds(h: HistogramDelta | None, q: float) -> tuple[float, float] | None:
    """The bucket (lower, upper] the q-quantile lies in: all a histogram can say of it for sure."""
    bucket = quantile_bucket(h, q)
    return None if bucket is None else bucket[:2]


def quantile_bucket(h: HistogramDelta | None, q: float) -> tuple[float, float, float, float, float] | None:
    """(lower, upper, rank, count below, cumulative count) of the bucket holding the q-quantile."""
    if h is None or h.count <= 0:
        return None
    rank = q * h.buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, cumulative in h.buckets:
        if cumulative >= rank and cumulative > below:
            return lower, bound, rank, below, cumulative
        lower, below = bound, cumulative
    return lower, math.inf, rank, below, below
