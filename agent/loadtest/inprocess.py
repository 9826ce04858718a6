"""One point on the bundled engine, in this process: the lab with its hooks, sampler and
diagnosis."""

from __future__ import annotations

from stagelens.loadtest.point import Point, with_diagnosis
from stagelens.loadtest.stats import Sample, in_window, window_figures


class _Timelines:
    """A sampler listener keeping every finished request's timeline."""

    def __init__(self) -> None:
        self.items: list = []

    def __call__(self, _frame, timelines) -> None:
        self.items.extend(timelines)


def measure_inprocess(value, engine_cfg, workload_cfg, *, interval: float = 0.5,
                      diagnosis_config=None, nvml_snapshot: str | None = None) -> Point:
    """Run the workload (warm-up included) on a fresh instrumented engine and reduce it to a
    point."""
    from stagelens.diagnosis import diagnose

    # imports torch: only when a point really runs here
    from stagelens.lab.scenario_run import run_lab

    timelines = _Timelines()
    result = run_lab(engine_cfg, workload_cfg, interval=interval, diagnosis_config=diagnosis_config,
                     nvml_snapshot=nvml_snapshot, listeners=(timelines,))
    frames = result.frames
    # Frames carry both clocks: put the workload's start on the monotonic clock of the timelines.
    offset = frames[-1].time_unix - frames[-1].time_monotonic if frames else 0.0
    start = result.started_unix - offset
    warmup, duration = workload_cfg.warmup, workload_cfg.duration
    samples = [Sample(t.arrival - start,
                      t.first_token - t.arrival if t.first_token is not None else None,
                      t.finished - t.arrival if t.finished is not None else None,
                      t.finish_reason != "error")
               for t in timelines.items]
    figures = window_figures(in_window(samples, warmup, duration))
    recorded = [f for f in frames if start + warmup <= f.time_monotonic <= start + duration]
    diagnosis = diagnose(recorded, diagnosis_config) if len(recorded) >= 3 else result.diagnosis
    point = Point(value, throughput_tokens_per_s=result.figures["throughput_tokens_per_s"],
                  engine_busy_ratio=busy_ratio(recorded) if len(recorded) >= 2 else result.figures["engine_busy_ratio"],
                  extra={k: result.figures.get(k) for k in ("preemptions", "decided_wait_p99_s",
                                                            "kv_fragmentation_ratio",
                                                            "head_of_line_share",
                                                            "requests_submitted", "steps")},
                  **figures)
    return with_diagnosis(point, diagnosis.to_dict())


def busy_ratio(frames) -> float | None:
    """Seconds the engine spent in steps over wall seconds, between the first and the last frame."""
    with_counters = [f for f in frames if f.engine is not None and f.engine.counters.busy_seconds_total is not None]
    if len(with_counters) < 2:
        return None
    a, b = with_counters[0], with_counters[-1]
    span = b.time_monotonic - a.time_monotonic
    busy = b.engine.counters.busy_seconds_total - a.engine.counters.busy_seconds_total
    return min(1.0, busy / span) if span > 0 else None
