"""Knee detection on constructed curves: a pure function of the points."""

import pytest

from stagelens.loadtest.knee import find_knee, required_gain
from stagelens.loadtest.point import Point


def curve(values, throughput, p99):
    return [Point(v, throughput_tokens_per_s=t, latency_p99_s=p) for v, t, p in zip(values, throughput, p99,
                                                                                     strict=True)]


def steps(start, n):
    """Loads raised 10% a step, as `bench stress` does."""
    out = [start]
    for _ in range(n - 1):
        out.append(round(out[-1] * 1.1, 6))
    return out


def test_flat_after_rise_is_a_knee_at_the_last_rising_point():
    loads = steps(10, 6)
    points = curve(loads, [100, 110, 121, 133, 135, 136], [0.30, 0.31, 0.32, 0.33, 0.34, 0.35])
    knee = find_knee(points)
    assert knee.index == 3 and knee.past_index == 4 and knee.rules == ["throughput_gain"] and knee.confirmed
    assert "133 → 135 tokens/s" in knee.reason and "+5%" in knee.reason


def test_p99_explosion_is_a_knee_even_while_throughput_still_rises():
    # The report: batch 8 → 16, throughput +14%, P99 350 ms → 1.2 s.
    points = curve([2, 4, 8, 16, 32], [60, 115, 210, 240, 250], [0.30, 0.32, 0.35, 1.2, 2.5])
    knee = find_knee(points)
    assert (knee.index, knee.past_index) == (2, 3)
    assert set(knee.rules) == {"throughput_gain", "p99_jump"}
    assert "350 ms → 1.20 s" in knee.reason and "×3.4" in knee.reason


def test_a_doubling_must_gain_more_than_a_ten_percent_step():
    assert required_gain(10, 11, 0.05) == pytest.approx(1.05)
    assert required_gain(8, 16, 0.05) == pytest.approx(2 ** (0.5119), rel=1e-3)
    assert required_gain("on", "off", 0.05) == pytest.approx(1.05)


def test_no_knee_on_a_curve_that_keeps_scaling():
    loads = steps(10, 6)
    points = curve(loads, [100 * v / 10 for v in loads], [0.30, 0.31, 0.31, 0.32, 0.33, 0.34])
    assert find_knee(points) is None
    assert find_knee(points[:1]) is None and find_knee([]) is None


def test_sla_breach_is_the_knee_at_once():
    points = curve([1, 2, 4, 8], [100, 200, 400, 800], [0.2, 0.25, 0.35, 0.6])
    knee = find_knee(points, p99_sla=0.5)
    assert (knee.index, knee.past_index, knee.rules) == (2, 3, ["p99_sla"])
    assert "500 ms SLA" in knee.reason
    first = find_knee(points, p99_sla=0.1)
    assert first.index is None and first.past_index == 0 and "first point" in first.reason


def test_noisy_non_monotone_dip_is_not_taken_for_the_knee():
    loads = steps(10, 6)
    # a dip at the third point, back on course at the fourth; the real flattening comes at the fifth
    points = curve(loads, [100, 110, 104, 125, 127, 128], [0.30, 0.31, 0.33, 0.32, 0.33, 0.34])
    knee = find_knee(points)
    assert knee.index == 3 and knee.past_index == 4 and knee.confirmed
    # a P99 spike that does not last is noise too
    spiky = curve(loads, [100 * v / 10 for v in loads], [0.30, 0.31, 0.60, 0.32, 0.33, 0.34])
    assert find_knee(spiky) is None


def test_a_trip_at_the_last_point_is_reported_unconfirmed():
    points = curve([10, 11, 12.1], [100, 110, 111], [0.3, 0.3, 0.3])
    knee = find_knee(points)
    assert knee.past_index == 2 and not knee.confirmed and "not confirmed" in knee.reason


def test_rules_can_be_switched_off_for_settings_that_are_not_a_load():
    points = curve([16, 32, 64], [200, 201, 199], [0.30, 0.31, 0.30])
    assert find_knee(points, gain_threshold=None) is None
    assert find_knee(points).rules == ["throughput_gain"]
    jumpy = curve(["on", "off"], [200, 150], [0.3, 0.9])
    assert find_knee(jumpy, gain_threshold=None).rules == ["p99_jump"]


def test_ttft_p99_can_be_the_judged_metric():
    points = [Point(v, throughput_tokens_per_s=t, latency_p99_s=0.5, ttft_p99_s=f)
              for v, t, f in ((1, 100, 0.05), (2, 200, 0.06), (4, 400, 0.2), (8, 800, 0.4))]
    assert find_knee(points) is None
    assert find_knee(points, metric="ttft").past_index == 2
