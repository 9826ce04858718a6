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
RESTART_GRACE_S = 5.0    # requests in flight get this long to finish before a restart aborts them


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

    def trouble(self) -> str | None:
        """Why the hosted engine does not serve, or None."""
        engine = self.engine
        if engine is None:
            return "the lab engine is not running (restarting or stopped)"
        if engine.failure is not None:
            return f"the lab engine is down: {engine.failure}"
        return None if engine.serving else "the lab engine is stopping"

    def start(self, scenario: str | None = None, overrides: dict | None = None) -> None:
        """(Re)start the engine with the base flags, a scenario's defaults and `overrides`. Settings that
        cannot run raise UserError before the running engine is touched; requests in flight on it get
        `RESTART_GRACE_S` to finish, then end with reason `abort` (their clients get an answer)."""
        scenario = scenario if scenario is not None else self.settings.scenario
        defaults = SCENARIOS[scenario].defaults if scenario else {}
        engine_cfg, workload_cfg = build_configs({**self.settings.flags, **(overrides or {})}, defaults)
        with self._lock:
            self._stop_current(RESTART_GRACE_S)
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

    def stop(self, grace_s: float = 0.0) -> None:
        with self._lock:
            self._stop_current(grace_s)

    def _stop_current(self, grace_s: float) -> None:
        self._stop_workload.set()
        if self._workload is not None:
            self._workload.join(timeout=40)
            self._workload = None
        if self.engine is not None:
            self.engine.stop(grace_s)
            uninstrument(self.engine)
            self.engine = None
