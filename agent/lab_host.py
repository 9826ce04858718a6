"""The lab engine hosted by `stagelens serve --engine lab`: built from flags (and a scenario), observed
by the hooks, optionally driven by the scenario's workload in the background, and restartable with
another scenario from the API."""

from __future__ import annotations

import logging
import threading

from agent.commands.engine_flags import build_configs
from agent.scenarios import SCENARIOS
from engine_hooks import instrument, uninstrument
from engine_hooks.engine import LLMEngine
from engine_hooks.engine.workload import run_workload

log = logging.getLogger(__name__)


class LabHost:
    def __init__(self, settings, sampler) -> None:
        self.settings = settings
        self.sampler = sampler
        self.engine: LLMEngine | None = None
        self.recorder = None
        self.scenario: str | None = None
        self._workload: threading.Thread | None = None
        self._stop_workload = threading.Event()
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self.engine is not None

    def start(self, scenario: str | None = None, overrides: dict | None = None) -> None:
        """(Re)start the engine with the base flags, a scenario's defaults and `overrides`."""
        scenario = scenario if scenario is not None else self.settings.scenario
        defaults = SCENARIOS[scenario].defaults if scenario else {}
        engine_cfg, workload_cfg = build_configs({**self.settings.flags, **(overrides or {})}, defaults)
        with self._lock:
            self._stop_current()
            engine = LLMEngine(engine_cfg)
            self.recorder = instrument(engine)
            self.sampler.recorder = self.recorder
            engine.start()
            self.engine, self.scenario = engine, scenario
            if scenario:
                self._stop_workload = threading.Event()
                self._workload = threading.Thread(target=self._drive, args=(engine, workload_cfg, self._stop_workload),
                                                  name="stagelens-workload", daemon=True)
                self._workload.start()

    def _drive(self, engine, workload_cfg, stop: threading.Event) -> None:
        try:
            run_workload(engine, workload_cfg, stop=stop, drain_timeout=5)
        except Exception:   # the API keeps serving even if a scenario's workload breaks
            log.exception("the scenario workload stopped")

    def stop(self) -> None:
        with self._lock:
            self._stop_current()

    def _stop_current(self) -> None:
        self._stop_workload.set()
        if self._workload is not None:
            self._workload.join(timeout=40)
            self._workload = None
        if self.engine is not None:
            self.engine.stop()
            uninstrument(self.engine)
            self.engine = None
