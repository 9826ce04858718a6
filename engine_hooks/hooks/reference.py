"""Reading the ideal-layout attention curve (pure Python: the agent reads it without torch)."""

from __future__ import annotations

import bisect
import math


def _along(points: list, x: float) -> float:
    """Log-linear interpolation over sorted (x, y) points, held flat beyond the ends."""
    xs = [p[0] for p in points]
    i = bisect.bisect_left(xs, x)
    if i == 0:
        return points[0][1]
    if i == len(points):
        return points[-1][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    f = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return y0 + f * (y1 - y0)


def reference_at(reference: dict | None, sequences: int, nbytes: float) -> float | None:
    """Bytes/s the ideal layout achieves for `sequences` decodes reading `nbytes` per attention
    call."""
    if not reference or not reference.get("curves") or sequences < 1 or nbytes <= 0:
        return None
    per_batch = [(n, _along(curve, nbytes)) for n, curve in zip(reference["sequences"], reference["curves"],
                                                                   strict=True)]
    return _along(per_batch, sequences)
