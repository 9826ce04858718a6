"""What the span fit (agent/whatif/spans.py) asks of the requests' intervals, in O(log n) a question
instead of a pass over every request: how much of an interval the others' intervals cover, in all
and weighted (`Coverage`); the longest overlap of one model's intervals with it (`LongestOverlap`);
which intervals hold a point, swept in order (`Holding`).

Coverage sums are exact: times are scaled to integers (a float is an integer over a power of two),
so a 10-minute recording of epoch times loses nothing to cancellation, and a sum is rounded once, at
the end.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from itertools import accumulate


class Coverage:
    """Intervals [start, end) with integer weights: `covered(a, b)` is the sum over intervals of
    the length each shares with [a, b), and the sum of that length times each weight; exact
    (integers), given as an (numerator, numerator) over `scale(b) - scale(a)`."""

    def __init__(self, intervals: list[tuple[float, float, int]], scale) -> None:
        # an empty or reversed one covers nothing
        proper = [(s, e, w) for s, e, w in intervals if s < e]
        self.scale = scale
        by_start, by_end = sorted(proper, key=lambda i: i[0]), sorted(proper, key=lambda i: i[1])
        self.starts, self.ends = [i[0] for i in by_start], [i[1] for i in by_end]
        self._start_sums = _prefix(by_start, 0, scale)
        self._end_sums = _prefix(by_end, 1, scale)

    def _below(self, x: float) -> tuple[int, int]:
        """Over every interval, the length (and the length times the weight) of its part below x,
        scaled: the sum of (x - start) over starts <= x, less that of (x - end) over ends <= x."""
        n_s, n_e = bisect_right(self.starts, x), bisect_right(self.ends, x)
        (c_s, w_s, t_s, wt_s), (c_e, w_e, t_e, wt_e) = self._start_sums[n_s], self._end_sums[n_e]
        big_x = self.scale(x)
        return big_x * (c_s - c_e) - (t_s - t_e), big_x * (w_s - w_e) - (wt_s - wt_e)

    def covered(self, a: float, b: float) -> tuple[int, int]:
        (low, low_w), (high, high_w) = self._below(a), self._below(b)
        return high - low, high_w - low_w


def _prefix(intervals, at: int, scale) -> list[tuple[int, int, int, int]]:
    """(count, sum of weights, sum of scaled times, sum of weight x scaled time) of the first k,
    for each k."""
    out = [(0, 0, 0, 0)]
    c = w = t = wt = 0
    for interval in intervals:
        big, weight = scale(interval[at]), interval[2]
        c, w, t, wt = c + 1, w + weight, t + big, wt + weight * big
        out.append((c, w, t, wt))
    return out


def exact_scale(times) -> callable:
    """A function from each of `times` to an integer, the same multiple of every one (2**k, k the
    finest binary place any of them uses)."""
    places = max((_place(t) for t in times), default=0)

    def scale(t: float) -> int:
        numerator, denominator = t.as_integer_ratio()
        return numerator << (places - denominator.bit_length() + 1)

    return scale


def _place(t: float) -> int:
    return t.as_integer_ratio()[1].bit_length() - 1


class LongestOverlap:
    """One model's intervals: the longest part one of them shares with [a, b), computed as
    `min(end, b) - max(start, a)` is, so that the answer is that float exactly."""

    def __init__(self, intervals: list[tuple[float, float]]) -> None:
        intervals = sorted(intervals)
        self.starts = [s for s, _ in intervals]
        # of those starting so far
        self.latest_end = list(accumulate((e for _, e in intervals), max))
        self._longest = _RangeMax([e - s for s, e in intervals])

    def longest(self, a: float, b: float) -> float:
        best = 0.0
        # those starting at or before a: the latest end is the longest
        k = bisect_right(self.starts, a)
        if k:
            best = max(best, min(self.latest_end[k - 1], b) - a)
        # those starting inside: min(length, b - start), the largest
        hi = bisect_left(self.starts, b)
        if k < hi:
            best = max(best, self._inside(k, hi, b))
        return best

    def _inside(self, lo: int, hi: int, b: float) -> float:
        """max over k in [lo, hi) of min(length_k, b - start_k): b - start falls as k rises, the
        longest length from lo on rises, and the answer is where they cross (found by halving)."""
        starts, longest = self.starts, self._longest
        # the first k whose longest length from lo reaches b - start_k
        left, right = lo, hi
        while left < right:
            mid = (left + right) // 2
            if longest.max(lo, mid) >= b - starts[mid]:
                right = mid
            else:
                left = mid + 1
        best = longest.max(lo, left - 1) if left > lo else float("-inf")
        if left < hi:
            best = max(best, b - starts[left])
        return best


class _RangeMax:
    """The largest of values[lo..hi] (both ends in) in O(1): a sparse table, n log n entries."""

    def __init__(self, values: list[float]) -> None:
        self.levels = [values]
        width = 1
        while 2 * width <= len(values):
            prev = self.levels[-1]
            self.levels.append([max(prev[i], prev[i + width]) for i in range(len(prev) - width)])
            width *= 2

    def max(self, lo: int, hi: int) -> float:
        level = (hi - lo + 1).bit_length() - 1
        row = self.levels[level]
        return max(row[lo], row[hi - (1 << level) + 1])


class Holding:
    """Intervals [start, end), each with a model and an integer weight, asked in rising order of
    the point: those holding the point, their count, weight and models (a model counted once)."""

    def __init__(self, intervals: list[tuple[float, float, int, str]]) -> None:
        proper = [i for i in intervals if i[0] < i[1]]
        self._by_start = sorted(proper, key=lambda i: i[0])
        self._by_end = sorted(proper, key=lambda i: i[1])
        self._entered = self._left = 0
        self.count = self.weight = 0
        self.models: Counter[str] = Counter()

    def at(self, x: float) -> None:
        """Move to x (no lower than the last): those starting at or before it in, those ending at
        or before out."""
        while self._entered < len(self._by_start) and self._by_start[self._entered][0] <= x:
            self._change(self._by_start[self._entered], 1)
            self._entered += 1
        while self._left < len(self._by_end) and self._by_end[self._left][1] <= x:
            self._change(self._by_end[self._left], -1)
            self._left += 1

    def _change(self, interval, sign: int) -> None:
        _, _, weight, model = interval
        self.count += sign
        self.weight += sign * weight
        self.models[model] += sign
        if not self.models[model]:
            del self.models[model]
