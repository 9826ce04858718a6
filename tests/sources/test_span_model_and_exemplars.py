"""What the engine's own spans carry beyond their figures: the model (from `/metrics` where a span names none, as
vLLM V1's do not) and the request's trace id, which the agent's scheduler-wait histogram carries as its exemplar so a
Grafana user jumps from the histogram to the engine's own trace."""

import time

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest

from stagelens.engine_hooks.records.timeline_reading import TimelineError, read_timeline
from stagelens.metrics.waits import WaitMetrics
from stagelens.sources.scrape.engine_source import VllmSource
from tests.helpers.engine_stub import Engine, fixture, read_with_spans
from tests.helpers.otlp_posts import TRACEPARENT, vllm_spans

ENGINE_TRACE = TRACEPARENT.split("-")[1]     # the client's trace, which vLLM's llm_request span joins
MODEL = "meta-llama/Llama-3.1-8B-Instruct"   # the fixture's model_name label


@pytest.fixture
def engine():
    served = Engine()
    yield served
    served.close()


def vllm_reading(engine, *requests: dict) -> VllmSource:
    """A vLLM source that scraped the fixture twice and received `requests` as vLLM's llm_request spans."""
    return read_with_spans(engine, vllm_spans(*requests))[0]


def test_a_span_without_its_model_takes_the_one_metrics_names(engine):
    source = vllm_reading(engine, {"gen_ai.request.id": "unnamed", "gen_ai.response.model": None},
                          {"gen_ai.request.id": "named", "gen_ai.response.model": "its-own"})
    models = {t.request_id: t.model for t in source.recent_timelines()}
    assert models == {"unnamed": MODEL, "named": "its-own"}
    window, _ = source._window_timelines(0.0)
    assert {t.request_id: t.model for t in window} == models
    assert {t.model for t in source.spans.recent_timelines()} == {"unknown", "its-own"}   # the receiver's kept as sent


def test_the_engines_trace_id_is_the_scheduler_waits_exemplar(engine):
    [timeline] = vllm_reading(engine, {"gen_ai.latency.time_in_queue": 0.25}).recent_timelines()
    assert timeline.trace_id == ENGINE_TRACE
    registry = CollectorRegistry()
    WaitMetrics(registry, trace_id_for=lambda _t: "f" * 32).on_frame(None, [timeline])   # the agent's own: second
    exposed = generate_latest(registry).decode()
    bucket = next(line for line in exposed.splitlines()
                  if line.startswith('stagelens_scheduler_wait_seconds_bucket{le="0.25"}'))
    assert f'# {{trace_id="{ENGINE_TRACE}"}} 0.25' in bucket


def test_a_trace_id_read_back_is_one_or_refused():
    tl = {"request_id": "r", "prompt_tokens": 1, "output_tokens": 1, "arrival": 0.0}
    assert read_timeline({**tl, "trace_id": ENGINE_TRACE}).trace_id == ENGINE_TRACE
    assert read_timeline(tl).trace_id is None
    with pytest.raises(TimelineError):
        read_timeline({**tl, "trace_id": "x" * 500})    # never an exemplar label past what Prometheus takes


def test_after_a_restart_the_block_size_advice_weighs_only_the_new_engines_requests(engine):
    """`serve` outlives the vLLM it reads: once a counter falls (a restart), the requests the engine before it
    served no longer stand for this one's lengths."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from stagelens.sources.otlp.receiver import OtlpReceiver

    receiver = OtlpReceiver()
    receiver.ingest(encode_spans(vllm_spans(*({"gen_ai.request.id": f"old-{i}"} for i in range(3)))
                                 ).SerializeToString(), "application/x-protobuf")
    source = VllmSource(engine.url, timeout_s=2.0, spans=receiver)
    now = time.monotonic()
    engine.body = fixture("vllm_v1_new_names.txt")
    source.snapshot(now)
    engine.body = fixture("vllm_v1_new_names.next.txt")
    assert source.snapshot(now + 1).window.kv.sequence_lengths        # the same engine: its requests count
    engine.body = fixture("vllm_v1_new_names.txt")                    # its counters fell: a new engine
    after = source.snapshot(now + 2)
    assert after.window.kv.sequence_lengths is None
