"""`EngineHost`: the bundled engine hosted in this process — built from a configuration,
instrumented, its flight recorder the engine source a `Sampler` reads, driven by a workload,
restarted with other settings and stopped cleanly.

`stagelens lab` (a run judged end to end), `serve --engine lab` (the engine behind /v1/completions,
a scenario's workload in the background), the TUI's local mode and bench/ all host the engine
through it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from stagelens.engine_hooks import instrument, uninstrument
from stagelens.engine_hooks.engine import EngineConfig, EngineStopped, LLMEngine
from stagelens.engine_hooks.records.snapshot import EngineSnapshot
from stagelens.lab.workload import WorkloadConfig, WorkloadRun, run_workload

log = logging.getLogger(__name__)
RESTART_GRACE_S = 5.0      # requests in flight get this long to finish before a restart aborts them
DRAIN_S = 5.0              # a background workload told to stop waits this long for its requests
JOIN_S = 40.0              # ... and its thread this long (its drain, then the engine's grace)


class EngineHost:
    """`face`, when given, are VllmFace's settings (engine_hooks/engine/vllm_face: host, port,
    otlp_traces_endpoint, kv_events_endpoint): each engine hosted then also speaks vLLM's
    interfaces, on the same port across restarts, so that `--engine vllm --engine-url` can read
    it as it would a vLLM server."""

    def __init__(self, face: dict | None = None) -> None:
        self.face_settings = face
        self.face = None           # the VllmFace of the engine hosted now
        self.engine: LLMEngine | None = None
        # the flight recorder of the engine hosted now, or of the last one stopped
        self.recorder = None
        self._workload: threading.Thread | None = None
        self._stop_workload = threading.Event()
        self._lock = threading.Lock()

    # --- the sampler's engine source --------------------------------------------------------------
    def snapshot(self, now_monotonic: float) -> EngineSnapshot:
        """The engine snapshot (docs/snapshot.md) of the hosted engine; after a stop, of the last
        one."""
        recorder = self.recorder
        if recorder is None:
            raise RuntimeError("no engine has been started")
        return recorder.snapshot(now_monotonic)

    def recent_timelines(self, since: float | None = None) -> list:
        recorder = self.recorder
        return [] if recorder is None else recorder.recent_timelines(since=since)

    def recent_steps(self, since: float | None = None) -> list[dict]:
        """The steps the flight recorder holds that ended after `since` (monotonic): what what-if
        fits."""
        recorder = self.recorder
        return [] if recorder is None else recorder.recent_steps(since=since)

    def recent_loads(self, since: float | None = None) -> list[dict]:
        recorder = self.recorder
        return [] if recorder is None else [ld for ld in recorder.loads.items() if since is None or ld["end"] > since]

    def whatif_window(self) -> dict:
        """What what-if replays of the hosted engine: its finished requests' timelines, settings,
        steps and loads."""
        from stagelens.bundle import engine_records, engine_settings

        recorder, engine = self.recorder, self.engine
        out = {"timelines": [t.to_dict() for t in self.recent_timelines()], "engine_config": None,
               "steps": [], "loads": []}
        if recorder is not None and engine is not None:
            out["engine_config"] = engine_settings(engine.config)
            out.update(engine_records(self.recent_steps(), self.recent_loads()))
        return out

    def trouble(self) -> str | None:
        """Why the hosted engine does not serve, or None."""
        engine = self.engine
        if engine is None:
            return "the lab engine is not running (restarting or stopped)"
        if engine.failure is not None:
            return f"the lab engine is down: {engine.failure}"
        return None if engine.serving else "the lab engine is stopping"

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self, engine_cfg: EngineConfig, workload: WorkloadConfig | None = None,
              repeat: bool = False, grace_s: float = RESTART_GRACE_S) -> LLMEngine:
        """(Re)start with `engine_cfg`. An engine already hosted stops first: its requests in
        flight get `grace_s` to finish, then end with reason `abort` (their clients get an
        answer). With `workload`, the engine is driven in the background, round after round with
        the next seed when `repeat`."""
        with self._lock:
            self._stop_current(grace_s)
            engine = LLMEngine(engine_cfg)
            self.recorder = instrument(engine)
            engine.start()
            self.engine = engine
            if self.face_settings is not None:
                from stagelens.engine_hooks.engine.vllm_face import VllmFace

                self.face = VllmFace(engine, **self.face_settings).start()
            if workload is not None:
                self._stop_workload = threading.Event()
                args = (engine, workload, repeat, self._stop_workload)
                self._workload = threading.Thread(target=self._drive, args=args,
                                                  name="stagelens-workload", daemon=True)
                self._workload.start()
            return engine

    def run(self, workload: WorkloadConfig, on_progress=None, stop: threading.Event | None = None) -> WorkloadRun:
        """Drive the hosted engine with `workload` on this thread until its requests have
        finished. Raises EngineStopped when the engine's loop died (every request has already
        failed with the reason)."""
        if self.engine is None:
            raise EngineStopped("no engine is hosted")
        return run_workload(self.engine, workload, on_progress=on_progress, stop=stop)

    def stop(self, grace_s: float = 0.0) -> None:
        """Stop the background workload and the engine (requests in flight get `grace_s`); the
        recorder stays readable, so one last snapshot shows the drained state."""
        with self._lock:
            self._stop_current(grace_s)

    def _stop_current(self, grace_s: float) -> None:
        if self.face is not None:
            self.face.stop()
            self.face = None
        self._stop_workload.set()
        engine, self.engine = self.engine, None
        if engine is not None:
            # what is still in flight ends now, so the workload's drain returns
            engine.stop(grace_s)
        if self._workload is not None:
            self._workload.join(timeout=JOIN_S)
            self._workload = None
        if engine is not None:
            uninstrument(engine)

    def _drive(self, engine: LLMEngine, workload: WorkloadConfig, repeat: bool,
               stop: threading.Event) -> None:
        round_ = 0
        try:
            while not stop.is_set():
                cfg = dataclasses.replace(workload, seed=workload.seed + round_) if round_ else workload
                run_workload(engine, cfg, stop=stop, drain_timeout=DRAIN_S)
                round_ += 1
                if not repeat:
                    return
        # stopped under the workload (a restart, the end): nothing to report
        except EngineStopped:
            if not stop.is_set():
                log.warning("the lab engine stopped under its workload: %s", engine.failure)
        except Exception:           # the API keeps serving even if a scenario's workload breaks
            log.exception("the scenario workload stopped")
