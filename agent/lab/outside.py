"""The hosted engine seen from outside, as stagelens sees a vLLM server: the engine speaks vLLM's
interfaces (engine_hooks/engine/vllm_face: its /metrics on a port of its own, its llm_request
spans), and the same source `--engine vllm --engine-url` uses reads them (with its gauge poll
between scrapes), the spans arriving at an OtlpReceiver as vLLM would send them. Nothing of the
hooks reaches it. `run_lab(..., outside=True)` samples both in one run so that the two diagnoses of
the same requests can be compared (tests/lab/test_scenarios.py, bench/accuracy.py).
"""

from __future__ import annotations

from stagelens.diagnosis import DiagnosisConfig
from stagelens.diagnosis.whole_run import RunDiagnosis, judge_run
from stagelens.engine_hooks.engine import LLMEngine
from stagelens.frame import Frame
from stagelens.node_sampling import NodeSampling
from stagelens.sources.otlp.receiver import OtlpReceiver
from stagelens.sources.scrape.engine_source import VllmSource
from stagelens.sources.scrape.gauge_poll import POLL_S

SPAN_DELAY_S = 1.0


class OutsideView:
    def __init__(self, engine: LLMEngine, nvml_snapshot: str | None, interval: float) -> None:
        from stagelens.engine_hooks.engine.vllm_face import VllmFace

        self.receiver = OtlpReceiver(http_port=0).start()
        # spans sent each second, as vLLM does with OTEL_BSP_SCHEDULE_DELAY=1000 (the SDK's default
        # is 5 s)
        self.face = VllmFace(engine, otlp_traces_endpoint=f"{self.receiver.http_url}/v1/traces",
                             otlp_schedule_delay_s=SPAN_DELAY_S)
        # what the outside learns of a moment reaches it up to one span export and one scrape later
        self.settle_s = SPAN_DELAY_S + interval
        self.face.start()
        self.source = VllmSource(self.face.url, spans=self.receiver, poll_s=POLL_S)
        # the receiver runs already (the face exports to it): the source's services are this view's
        # to run
        self.sampling = NodeSampling(self.source, nvml_snapshot, interval, run_source_services=False)

    def start(self) -> None:
        self.source.poller.start()
        self.sampling.start()

    def stop(self) -> None:
        """Stop sampling; the engine's last spans are flushed and received before the last frame."""
        self.sampling.stop(before_last_frame=self._drain)
        self.face.stop()
        self.receiver.stop()
        self.sampling.close()

    def _drain(self) -> None:
        self.source.poller.stop()
        self.face.spans.flush()

    def judge(self, until_unix: float, config: DiagnosisConfig | None = None) -> RunDiagnosis:
        """The run as seen from outside, judged as the hooks' run is: the loaded frames, every
        request. The outside learns of a request's wait only from its span, when the request
        ends: the loaded frames' end is where every request that arrived in the loaded time had
        ended, plus `settle_s` (one span export and one scrape), not the hooks' end. On a slow
        host a request queued at the end of the load ends seconds after it, and a judgment at the
        hooks' end would not have heard of its wait yet."""
        frames: list[Frame] = self.sampling.frames()
        timelines = self.source.recent_timelines()
        ends = [tl.finished for tl in timelines if tl.finished is not None and tl.arrival <= until_unix]
        heard = max([until_unix, *ends]) + self.settle_s
        loaded = [f for f in frames if f.time_unix <= heard] or frames
        return judge_run(loaded, timelines, config)
