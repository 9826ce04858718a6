"""The agent in-process with the bundled lab engine: the engine runs a scenario's workload in a thread,
and each poll takes one sample. `apply_fix` restarts the engine with the diagnosis's settings.

Everything that touches the engine runs on the poller's worker thread; `apply_fix` and `set_paused`
(UI thread) only leave a request for it.
"""

from __future__ import annotations

import dataclasses
import os
import threading

from agent.tui.source import Poll, Source

ENDLESS_S = 24 * 3600.0     # without --duration the workload runs until the TUI exits


class LocalSource(Source):
    kind = "local"
    can_fix = True

    def __init__(self, flags: dict, scenario: str | None = None, nvml_snapshot: str | None = None,
                 interval: float = 1.0) -> None:
        from agent.commands.engine_flags import build_configs
        from agent.scenarios import SCENARIOS

        super().__init__()
        self.flags = {k: v for k, v in flags.items() if v is not None}
        self.scenario = scenario
        self.defaults = dict(SCENARIOS[scenario].defaults) if scenario else {}
        if "duration" not in self.flags:
            self.defaults["duration"] = ENDLESS_S
        self.nvml_snapshot = nvml_snapshot
        self.interval = interval
        self.engine_cfg, self.workload_cfg = build_configs(self.flags, self.defaults)   # bad flags fail here
        self.applied: dict = {}
        self._pending_fix: dict | None = None
        self._lock = threading.Lock()
        self._timelines: list = []
        self._engine = self._recorder = self._sampler = self._probe = None
        self._stop = threading.Event()
        self._workload: threading.Thread | None = None

    @property
    def label(self) -> str:
        return f"local lab{' ' + self.scenario if self.scenario else ''}"

    # --- the worker thread ----------------------------------------------------------------------------
    def open(self) -> Poll:
        from probes.sample import NodeProbe, open_backend

        self._probe = NodeProbe(open_backend(self.nvml_snapshot), pid=os.getpid())
        self._start()
        return Poll(note="engine started")

    def _start(self) -> None:
        from agent.sampler import Sampler
        from engine_hooks import instrument
        from engine_hooks.engine import LLMEngine

        engine = LLMEngine(self.engine_cfg)
        self._recorder = instrument(engine)
        self._sampler = Sampler(node_probe=self._probe, recorder=self._recorder, interval=self.interval)
        self._sampler.listeners.append(self._on_frame)
        engine.start()
        self._engine = engine
        self._stop = threading.Event()
        self._workload = threading.Thread(target=self._run_workload, args=(engine, self._stop),
                                          name="stagelens-tui-workload", daemon=True)
        self._workload.start()

    def _run_workload(self, engine, stop: threading.Event) -> None:
        from engine_hooks.engine.workload import run_workload

        round_ = 0
        while not stop.is_set():
            cfg = dataclasses.replace(self.workload_cfg, seed=self.workload_cfg.seed + round_)
            run_workload(engine, cfg, stop=stop, drain_timeout=2.0)
            round_ += 1

    def _on_frame(self, _frame, timelines: list) -> None:
        self._timelines.extend(timelines)

    def _stop_engine(self) -> None:
        from engine_hooks import uninstrument

        self._stop.set()
        if self._workload is not None:
            self._workload.join(timeout=10)
        if self._engine is not None:
            self._engine.stop()
            uninstrument(self._engine)
        self._engine = self._workload = None

    def poll(self) -> Poll:
        with self._lock:
            fix, self._pending_fix = self._pending_fix, None
        if fix is not None:
            return self._restart(fix)
        if self.paused or self._sampler is None:
            return Poll()
        frame = self._sampler.tick()
        timelines, self._timelines = self._timelines, []
        return Poll([frame], [t.to_dict() for t in timelines])

    def _restart(self, fix: dict) -> Poll:
        from agent.commands.engine_flags import build_configs

        self._stop_engine()
        self.applied.update(fix)
        self.engine_cfg, self.workload_cfg = build_configs({**self.flags, **self.applied}, self.defaults)
        self._start()
        return Poll(note="engine restarted with the fix")

    def close(self) -> None:
        self._stop_engine()
        if self._probe is not None:
            self._probe.close()

    # --- the UI thread --------------------------------------------------------------------------------
    def apply_fix(self, flags: dict) -> None:
        with self._lock:
            self._pending_fix = dict(flags)
