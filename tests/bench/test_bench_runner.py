"""The run modes over a fake measurement: stress raises the load 10% a step and stops at a confirmed knee."""

import io

import pytest

from stagelens.errors import UserError
from stagelens.loadtest.point import Point
from stagelens.loadtest.progress import ProgressBar
from stagelens.loadtest.runner import KneeRule, run_stress, run_sweep
from stagelens.loadtest.variables import VARIABLES, next_load


def saturating(capacity: float):
    """Throughput follows the load up to `capacity`, then stays flat while P99 climbs."""
    seen = []

    def measure(load):
        seen.append(load)
        tp = min(load, capacity) * 10
        p99 = 0.3 if load <= capacity else 0.3 * (load / capacity) ** 6
        return Point(load, throughput_tokens_per_s=tp, latency_p99_s=p99,
                     firing_stages=["scheduler"] if load > capacity else [], verdict="firing" if load > capacity
                     else "ok", root_stage="scheduler" if load > capacity else None)
    return measure, seen


def test_stress_steps_ten_percent_and_stops_one_point_after_the_knee():
    measure, seen = saturating(capacity=13)
    out = io.StringIO()
    points, knee = run_stress(VARIABLES["rate"], 10.0, measure, KneeRule(), max_steps=12, seconds=1,
                              bar=ProgressBar("bench stress", 12, stream=out))
    assert seen[:3] == [10.0, 11.0, 12.1]
    assert knee is not None and knee.confirmed and knee.index == 3      # 13.31 still gained (121 → 130)
    assert points[knee.past_index].stage == "scheduler"
    assert len(points) == knee.past_index + 2                           # one more point confirmed it
    assert "bench stress [" in out.getvalue() and "stage: scheduler" in out.getvalue()


def test_stress_stops_at_max_steps_without_a_knee():
    measure, seen = saturating(capacity=1e9)
    points, knee = run_stress(VARIABLES["concurrency"], 1, measure, KneeRule(), max_steps=4, seconds=1,
                              bar=ProgressBar("x", 4, enabled=False))
    assert seen == [1, 2, 3, 4] and knee is None                        # whole numbers move by at least one


def test_next_load():
    assert next_load(VARIABLES["concurrency"], 16, 0.1) == 18 and next_load(VARIABLES["rate"], 2.0, 0.1) == 2.2


def test_a_sweep_of_a_setting_that_is_not_a_load_ignores_throughput_gain():
    def measure(value):
        return Point(value, throughput_tokens_per_s=100, latency_p99_s=0.3)
    points, knee = run_sweep(VARIABLES["block_size"], [16, 32, 64], measure, KneeRule(), 1,
                             ProgressBar("x", 3, enabled=False))
    assert [p.value for p in points] == [16, 32, 64] and knee is None
    points, knee = run_sweep(VARIABLES["max_num_seqs"], [1, 2, 4], measure, KneeRule(), 1,
                             ProgressBar("x", 3, enabled=False))
    assert knee is not None and knee.rules == ["throughput_gain"]


@pytest.mark.parametrize("text", ["٣", "1_0", "4x"])
def test_a_swept_value_is_read_in_ascii_digits_as_every_numeric_flag(text):
    """`int()` reads another script's digits and underscores; a sweep's values are read as the flags are,
    and refused in `lab`'s words."""
    with pytest.raises(UserError, match=r"--max-num-seqs: must be a whole number in \[1, 1024\] requests, got '"):
        VARIABLES["max_num_seqs"].parse(f"2,{text}")
    assert VARIABLES["max_num_seqs"].parse("2, 4") == [2, 4] and VARIABLES["rate"].parse("1.5") == [1.5]
