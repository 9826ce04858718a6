"""The three run modes over a `measure(value) -> Point` callable: steady, stress to the knee,
sweep."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from stagelens.loadtest.knee import Knee, find_knee
from stagelens.loadtest.point import Point
from stagelens.loadtest.progress import ProgressBar
from stagelens.loadtest.variables import Variable, label, next_load

Measure = Callable[[object], Point]


@dataclass(frozen=True)
class KneeRule:
    # throughput gain per `step` of load below which the curve is flat
    gain_threshold: float | None = 0.05
    p99_factor: float | None = 1.5         # P99 above this times the point before
    p99_sla: float | None = None           # P99 above this many seconds
    step: float = 0.10
    metric: str = "latency"                # latency | ttft: which P99

    def for_variable(self, variable: Variable) -> KneeRule:
        """The throughput-gain rule only means something when the variable is a load."""
        if variable.load:
            return self
        return KneeRule(None, self.p99_factor, self.p99_sla, self.step, self.metric)

    def find(self, points: list[Point]) -> Knee | None:
        return find_knee(points, self.gain_threshold, self.p99_factor, self.p99_sla, self.step,
                         self.metric)

    def to_dict(self) -> dict:
        return asdict(self)


def _measure(measure: Measure, variable: Variable, value, index: int, total: int, seconds: float,
             bar: ProgressBar) -> Point:
    bar.start_point(index, f"{variable.flag[2:]}={label(value)}", seconds, total)
    point = measure(value)
    bar.end_point(point)
    return point


def run_sweep(variable: Variable, values: list, measure: Measure, rule: KneeRule, seconds: float,
              bar: ProgressBar) -> tuple[list[Point], Knee | None]:
    points = [_measure(measure, variable, v, i, len(values), seconds, bar) for i, v in enumerate(values)]
    return points, rule.for_variable(variable).find(points)


def run_stress(variable: Variable, start, measure: Measure, rule: KneeRule, max_steps: int,
               seconds: float, bar: ProgressBar) -> tuple[list[Point], Knee | None]:
    """Raise the load by `rule.step` a point until the first confirmed knee, or `max_steps`
    points."""
    points: list[Point] = []
    value = start
    for i in range(max_steps):
        points.append(_measure(measure, variable, value, i, max_steps, seconds, bar))
        knee = rule.find(points)
        if knee is not None and knee.confirmed:
            break
        value = next_load(variable, value, rule.step)
    return points, rule.find(points)


def run_steady(variable: Variable, value, measure: Measure, seconds: float,
               bar: ProgressBar) -> tuple[list[Point], Knee | None]:
    return [_measure(measure, variable, value, 0, 1, seconds, bar)], None
