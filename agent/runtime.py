"""The running agent: sampler, diagnosis, metrics and traces around one (optional) lab engine.

Every surface reads the same frames: the HTTP API, `/metrics`, the traces, the TUI's remote source.
Listener order matters: traces first (they mint the trace ids), then metrics (exemplars use them),
then the diagnosis, published with its frame, and the exposition rendered for the scrapers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from stagelens.diagnosis import DiagnosisConfig
from stagelens.diagnosis.evaluate import LiveDiagnosis
from stagelens.diagnosis.model import Diagnosis
from stagelens.diagnosis.tail import with_stages
from stagelens.frame import Frame
from stagelens.metrics.exporter import MetricsExporter
from stagelens.node_sampling import NodeSampling

log = logging.getLogger(__name__)
# request id -> trace id / traceparent, for exemplars and HTTP clients' parents
TRACE_MEMORY = 4096
STALE_AFTER_INTERVALS = 5   # a frame older than this many intervals means the sampler is stuck
PREDICTION_TTL_S = 10.0     # the fix's predicted effect is simulated again at most this often


@dataclass
class LabSettings:
    flags: dict            # engine and workload flags as the user gave them
    scenario: str | None   # a scenario whose workload runs in the background, if any
    vllm_face: dict | None = None   # VllmFace's settings: the engine also speaks vLLM's interfaces


class AgentRuntime:
    def __init__(self, diagnosis_config: DiagnosisConfig | None = None, interval: float = 1.0,
                 nvml_snapshot: str | None = None, tracer=None, lab: LabSettings | None = None,
                 engine_source=None, vllm_names: bool = False, request_timeout: float = 600.0,
                 history: int = 900) -> None:
        self.diagnosis_config = diagnosis_config or DiagnosisConfig()
        self.nvml_snapshot = nvml_snapshot
        self.interval = interval
        self.request_timeout = request_timeout   # seconds a hosted engine request may live
        self.lab_settings = lab
        # the hosted engine (agent.lab.host.EngineHost), when there is one
        self.lab = None
        if lab is not None:
            from stagelens.lab.host import EngineHost

            self.lab = EngineHost(face=lab.vllm_face)
        # the hosted engine, or one read from outside (agent/sources), or none: sampled alike
        self.sampling = NodeSampling(self.lab or engine_source, nvml_snapshot, interval,
                                     history=history)
        self.sampler = self.sampling.sampler
        self.backend = self.sampling.probe.backend
        self.tracer = tracer
        self.metrics = MetricsExporter(self.latest_frame, self.latest_diagnosis, self.trace_id_for,
                                       vllm_names)
        self._lock = threading.Lock()
        # The latest frame and its diagnosis, published together (one assignment): a scrape or an
        # API call never sees a new frame with the previous frame's diagnosis.
        self._published: tuple[Frame | None, Diagnosis | None] = (None, None)
        self._live = LiveDiagnosis(self.diagnosis_config)
        # (the fix, when, its predicted effect): see predicted_fix
        self._prediction: tuple | None = None
        self._predicting = threading.Lock()        # held while one is computed
        self._trace_ids: OrderedDict[str, str] = OrderedDict()
        self._traceparents: OrderedDict[str, str] = OrderedDict()
        self.sampler.listeners += [self._export_traces, self.metrics.on_frame, self._publish]

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        if self.lab_settings:
            self.start_lab(self.lab_settings.scenario)
        self.sampling.start()

    def start_lab(self, scenario: str | None, overrides: dict | None = None) -> None:
        """(Re)start the hosted engine with the base flags, a scenario's defaults (its workload
        then runs in the background) and `overrides`. Settings that cannot run raise UserError
        before the running engine is touched; its requests in flight get a grace to finish
        (agent.lab.host)."""
        from stagelens.lab.settings import scenario_configs

        engine_cfg, workload_cfg = scenario_configs(self.lab_settings.flags, scenario, overrides)
        self.lab.start(engine_cfg, workload_cfg if scenario else None)

    def stop(self, grace_s: float = 0.0) -> None:
        """Requests in flight get `grace_s` to finish; the last frame's timelines are exported,
        then the tracer drains and the probes close."""
        if self.lab:
            self.lab.stop(grace_s)
        # its last frame: the requests that ended while stopping reach the traces and record
        self.sampling.stop()
        self.sampling.close()
        if self.tracer:
            self.tracer.shutdown()

    # --- what every surface reads -----------------------------------------------------------------
    def latest_frame(self) -> Frame | None:
        return self._published[0]

    def latest_diagnosis(self) -> Diagnosis | None:
        return self._published[1]

    def frames(self, since: float | None) -> list[Frame]:
        return self.sampler.frames(since)

    def slowest_requests(self, n: int) -> list[dict]:
        timelines = [t for t in self.sampling.recent_timelines() if t.finished is not None]
        timelines.sort(key=lambda t: t.finished - t.arrival, reverse=True)
        return [with_stages(t.to_dict()) for t in timelines[:n]]

    def whatif_window(self) -> dict:
        """What `whatif --connect` replays: the recent request timelines, and of the hosted
        engine its settings, steps and model loads (an engine read from outside has only its
        spans' timelines)."""
        return self.sampling.whatif_window()

    def predicted_fix(self, diagnosis: Diagnosis) -> dict | None:
        """The diagnosis's fix with its predicted effect on the recent window
        (agent.whatif.fix_effect), as last computed for the same fix. A simulation costs a few
        hundred ms, so it never runs on the caller's thread: a missing or older than
        PREDICTION_TTL_S prediction is computed again on a thread of its own, and the answer is
        the last one (None until the first is ready)."""
        from stagelens.lab.fixes import fix_flags

        key = tuple(sorted((k, str(v)) for k, v in fix_flags(diagnosis).items()))
        if not key:
            return None
        cached = self._prediction
        fresh = cached is not None and cached[0] == key and time.monotonic() - cached[1] < PREDICTION_TTL_S
        if not fresh and self._predicting.acquire(blocking=False):
            threading.Thread(target=self._predict, args=(key, diagnosis), name="stagelens-whatif",
                             daemon=True).start()
        return cached[2] if cached is not None and cached[0] == key else None

    def _predict(self, key: tuple, diagnosis: Diagnosis) -> None:
        from stagelens.whatif.fix_effect import predicted_effect
        from stagelens.whatif.workload import observed_from_window

        try:
            effect = predicted_effect(lambda: observed_from_window("the agent's recent window", self.whatif_window(),
                                                                   self.sampler.frames(None)), diagnosis)
            self._prediction = (key, time.monotonic(), effect)
        finally:
            self._predicting.release()

    def ready(self) -> tuple[bool, str]:
        """Ready when a recent sample exists, some collector works and a hosted engine serves."""
        frame = self.latest_frame()
        if frame is None:
            return False, "no sample taken yet"
        age = time.time() - frame.time_unix
        if age > STALE_AFTER_INTERVALS * self.interval:
            return False, f"the latest sample is {age:.0f} s old: sampling is stuck"
        if frame.collectors and len(frame.failed_collectors()) == len(frame.collectors):
            failed = "; ".join(f"{c.name}: {c.error}" for c in frame.collectors)
            return False, f"every collector failed ({failed})"
        trouble = self.lab.trouble() if self.lab else None
        if trouble:
            return False, trouble
        return True, "ready"

    # --- per request ------------------------------------------------------------------------------
    def remember_traceparent(self, request_id: str, traceparent: str | None) -> None:
        if traceparent:
            with self._lock:
                _bounded_put(self._traceparents, request_id, traceparent)

    def trace_id_for(self, timeline) -> str | None:
        with self._lock:
            return self._trace_ids.get(timeline.request_id)

    # --- sampler listeners ------------------------------------------------------------------------
    def _export_traces(self, frame: Frame, timelines: list) -> None:
        if self.tracer is None:
            return
        for t in timelines:
            with self._lock:
                parent = self._traceparents.pop(t.request_id, None)
            trace_id = self.tracer.export_timeline(t, traceparent=parent)
            if trace_id:
                with self._lock:
                    _bounded_put(self._trace_ids, t.request_id, trace_id)

    def _publish(self, frame: Frame, _timelines: list) -> None:
        self._live.add(frame)
        self._published = (frame, self._live.result())
        self.metrics.prerender()


def _bounded_put(store: OrderedDict, key: str, value: str) -> None:
    store[key] = value
    while len(store) > TRACE_MEMORY:
        store.popitem(last=False)

