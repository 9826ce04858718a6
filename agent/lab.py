"""The lab: the bundled engine on a workload, end to end, with the serving figures it produced."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from engine_hooks.engine import EngineConfig, LLMEngine
from engine_hooks.engine.summary import summarize
from engine_hooks.engine.workload import WorkloadConfig, WorkloadRun, run_workload


@dataclass
class LabResult:
    engine: EngineConfig
    workload: WorkloadConfig
    figures: dict


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
        line = (f"[{now - self.started:5.1f}s/{self.duration:g}s] submitted {len(submitted)} finished {done} "
                f"running {len(sched.running)} waiting {len(sched.waiting)} | {rate:6.1f} tok/s")
        self.stream.write(("\r" + line) if self._tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._tty:
            self.stream.write("\n")


def run_lab(engine_cfg: EngineConfig, workload_cfg: WorkloadConfig, progress: bool = False) -> LabResult:
    engine = LLMEngine(engine_cfg)
    engine.start()
    line = ProgressLine(engine, workload_cfg.duration) if progress else None
    try:
        run: WorkloadRun = run_workload(engine, workload_cfg, on_progress=line)
    finally:
        engine.stop()
        if line:
            line.close()
    figures = summarize(run.requests, run.elapsed, run.window_s, run.window_tokens)
    totals = engine.totals
    figures.update({
        "kv_waste_ratio": totals.kv_waste_ratio,
        "engine_busy_ratio": totals.busy_s / run.elapsed if run.elapsed else 0.0,
        "steps": totals.steps,
        "kv_cache_blocks": engine_cfg.num_blocks(),
        "kv_cache_bytes": engine.kv_cache.total_bytes,
    })
    return LabResult(engine_cfg, workload_cfg, figures)
