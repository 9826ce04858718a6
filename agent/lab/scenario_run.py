"""A lab run: the bundled engine hosted (agent.lab.host) on one workload, sampled, and the whole
run judged."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field

from stagelens.diagnosis import DiagnosisConfig
from stagelens.diagnosis.evaluate import stage_states
from stagelens.diagnosis.model import Diagnosis
from stagelens.diagnosis.whole_run import RunDiagnosis, judge_run
from stagelens.engine_hooks.engine import EngineConfig, EngineStopped, LLMEngine
from stagelens.engine_hooks.records.stats import percentile
from stagelens.errors import CollectError
from stagelens.frame import Frame
from stagelens.lab.host import EngineHost
from stagelens.lab.summary import summarize
from stagelens.lab.workload import WorkloadConfig
from stagelens.node_sampling import NodeSampling


@dataclass
class LabResult:
    engine: EngineConfig
    workload: WorkloadConfig
    figures: dict
    frames: list[Frame] = field(default_factory=list)
    diagnosis: Diagnosis | None = None      # the run's verdict (agent.diagnosis.whole_run)
    started_unix: float = 0.0
    # ... with the tail explained, the episodes and the end's state
    run: RunDiagnosis | None = None
    # with outside=True: the same run through its vLLM interfaces
    outside: RunDiagnosis | None = None
    # ... and the request timelines its spans gave
    outside_timelines: list = field(default_factory=list)

    def first_firing_s(self, stage: str, config: DiagnosisConfig | None = None) -> float | None:
        """Seconds from the start of the workload to the first sample where `stage` was reported
        firing."""
        for t, states in stage_states(self.frames, config):
            if states[stage] == "firing":
                return t - self.started_unix
        return None


class ProgressLine:
    """One status line on stderr, rewritten in place on a terminal, every few seconds otherwise."""

    def __init__(self, engine: LLMEngine, duration: float, stream=sys.stderr) -> None:
        self.engine, self.duration, self.stream = engine, duration, stream
        self.started = time.monotonic()
        self._last = 0.0
        self._tty = stream.isatty()

    def __call__(self, submitted) -> None:
        now = time.monotonic()
        if now - self._last < (0.25 if self._tty else 5.0):
            return
        self._last = now
        done = sum(1 for r in submitted if r.finished)
        tokens = sum(len(r.output_token_ids) for r in submitted)
        sched = self.engine.scheduler
        rate = tokens / (now - self.started)
        line = (f"[{now - self.started:5.1f}s/{self.duration:g}s] submitted {len(submitted)} "
                f"finished {done} running {len(sched.running)} waiting {len(sched.waiting)} | "
                f"{rate:6.1f} tok/s")
        self.stream.write(("\r" + line) if self._tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._tty:
            self.stream.write("\n")


def run_lab(engine_cfg: EngineConfig, workload_cfg: WorkloadConfig, progress: bool = False,
            interval: float = 1.0, diagnosis_config: DiagnosisConfig | None = None,
            nvml_snapshot: str | None = None, listeners: tuple = (),
            stop: threading.Event | None = None, outside: bool = False, on_start=None) -> LabResult:
    """Run the workload on an instrumented engine, sampling every `interval` seconds, and
    diagnose. Setting `stop` ends the arrivals early (a signal, a bundle that cannot be written);
    the requests in flight still finish and the last frame is taken, as at the end of the
    duration. With `outside`, the engine is also read through its vLLM-compatible interfaces only
    (agent.lab.outside) and judged again. `on_start(host, engine_cfg)` is called once the engine
    runs (a bundle writer follows its steps)."""
    host = EngineHost()
    sampling = NodeSampling(host, nvml_snapshot, interval, listeners=listeners)
    engine = host.start(engine_cfg)
    if on_start is not None:
        on_start(host, engine_cfg)
    view = None
    if outside:
        from stagelens.lab.outside import OutsideView

        view = OutsideView(engine, nvml_snapshot, interval)
    line = ProgressLine(engine, workload_cfg.duration) if progress else None
    started = time.time()
    sampling.start()
    if view:
        view.start()
    try:
        run = host.run(workload_cfg, on_progress=line, stop=stop)
    # its loop died: every request has already failed with the reason
    except EngineStopped as exc:
        raise CollectError(f"the lab engine stopped serving: {exc}") from None
    finally:
        # The engine stops before the last frame: a request is done (and the run returns) inside its
        # last step, while that step's timeline and step record reach the recorder only when the
        # step ends.
        sampling.stop(before_last_frame=lambda: _stop_engine(view, host))
        sampling.close()
        if line:
            line.close()
    frames = sampling.frames()
    figures = summarize(run.requests, run.elapsed, run.window_s, run.window_tokens)
    figures.update(_engine_figures(engine, host.recorder, run.elapsed))
    # The windows are judged on the loaded engine, as the report's steady-state method: the drain is
    # left out; the tail is every request's, as the P99 printed is.
    loaded = [f for f in frames if f.time_unix <= started + workload_cfg.duration] or frames
    judged = judge_run(loaded, host.recent_timelines(), diagnosis_config)
    seen_outside = view.judge(started + workload_cfg.duration, diagnosis_config) if view else None
    return LabResult(engine_cfg, workload_cfg, figures, frames, judged.diagnosis, started, judged,
                     seen_outside, view.source.recent_timelines() if view else [])


def _stop_engine(view, host: EngineHost) -> None:
    """The outside view first (its face reads the running engine), then the engine."""
    try:
        if view:
            view.stop()
    finally:
        host.stop()


def _engine_figures(engine: LLMEngine, recorder, elapsed: float) -> dict:
    totals = engine.totals
    run = recorder.run_figures()
    timelines = recorder.recent_timelines()
    loads = recorder.loads.items()
    return {
        "kv_waste_ratio": totals.kv_waste_ratio,
        "kv_fragmentation_ratio": run.kv.fragmentation_ratio,
        "kv_access_efficiency": run.kv.access_efficiency,
        "engine_busy_ratio": totals.busy_s / elapsed if elapsed else 0.0,
        "compute_utilisation_while_waiting": run.scheduler.busy_ratio_while_waiting,
        "decided_wait_p99_s": percentile([t.decided_wait_s for t in timelines], 99),
        "head_of_line_share": run.scheduler.head_of_line_share,
        "step_time_inflation": run.cold_path.step_time_inflation,
        "model_loads": len(loads),
        "model_load_seconds_mean": sum(ld["seconds"] for ld in loads) / len(loads) if loads else None,
        "model_load_seconds_max": max((ld["seconds"] for ld in loads), default=None),
        "model_load_bytes": sum(ld["bytes"] for ld in loads),
        "steps": totals.steps,
        "kv_cache_blocks": engine.config.num_blocks(),
        "kv_cache_bytes": engine.kv_cache.total_bytes,
        "hook_errors": sum(recorder.guard.errors.values()),
    }
