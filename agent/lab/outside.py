"""The hosted engine seen from outside, as stagelens sees a vLLM server: the engine speaks vLLM's interfaces
(engine_hooks/vllm_face: its /metrics on a port of its own, its llm_request spans), and the same source
`--engine vllm --engine-url` uses reads them (with its gauge poll between scrapes), the spans arriving at an
OtlpReceiver as vLLM would send them.
Nothing of the hooks reaches it. `run_lab(..., outside=True)` samples both in one run so that the two
diagnoses of the same requests can be compared (tests/test_scenarios.py, bench/accuracy.py).
"""

from __future__ import annotations

import os

from agent.diagnosis import DiagnosisConfig
from agent.diagnosis.run import RunDiagnosis, judge_run
from agent.frame import Frame
from agent.sampler import Sampler
from agent.sources.gauge_poll import POLL_S
from agent.sources.otlp_receiver import OtlpReceiver
from agent.sources.vllm import VllmSource
from engine_hooks.engine import LLMEngine
from probes.sample import NodeProbe, open_backend

SPAN_DELAY_S = 1.0


class OutsideView:
    def __init__(self, engine: LLMEngine, nvml_snapshot: str | None, interval: float) -> None:
        from engine_hooks.vllm_face import VllmFace

        self.receiver = OtlpReceiver(http_port=0).start()
        # spans sent each second, as vLLM does with OTEL_BSP_SCHEDULE_DELAY=1000 (the SDK's default is 5 s)
        self.face = VllmFace(engine, otlp_traces_endpoint=f"{self.receiver.http_url}/v1/traces",
                             otlp_schedule_delay_s=SPAN_DELAY_S)
        # what the outside learns of a moment reaches it up to one span export and one scrape later
        self.settle_s = SPAN_DELAY_S + interval
        self.face.start()
        self.source = VllmSource(self.face.url, spans=self.receiver, poll_s=POLL_S)
        self.probe = NodeProbe(open_backend(nvml_snapshot), pid=os.getpid())   # the process the hooks' run sees
        self.sampler = Sampler(node_probe=self.probe, engine_source=self.source, interval=interval)

    def start(self) -> None:
        self.source.poller.start()
        self.sampler.start()

    def stop(self) -> None:
        """Stop sampling; the engine's last spans are flushed and received before the last frame."""
        self.sampler.stop()
        self.source.poller.stop()
        self.face.spans.flush()
        self.sampler.tick()
        self.face.stop()
        self.receiver.stop()
        self.probe.close()

    def judge(self, until_unix: float, config: DiagnosisConfig | None = None) -> RunDiagnosis:
        """The run as seen from outside, judged as the hooks' run is: the loaded frames, every request; the
        loaded frames' end is `settle_s` later than the hooks', as the outside's evidence of the load's last
        seconds comes that much later (a step's gauges when it ends, a request's span up to an export later)."""
        frames: list[Frame] = self.sampler.frames()
        loaded = [f for f in frames if f.time_unix <= until_unix + self.settle_s] or frames
        return judge_run(loaded, self.source.recent_timelines(), config)
