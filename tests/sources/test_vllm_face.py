"""The bundled engine speaking vLLM: its `/metrics` (V1 families, names, labels, buckets) and its `llm_request`
OTLP spans, read over real HTTP the way stagelens reads a real vLLM server (parse_exposition, VllmSource, an
OTLP/HTTP receiver), with stagelens's hooks nowhere in the path."""

from __future__ import annotations

import gzip
import json
import logging
import math
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from stagelens.engine_hooks.engine import EngineConfig, FinishReason, LLMEngine, SamplingParams
from stagelens.engine_hooks.engine.vllm_face import VllmFace
from stagelens.engine_hooks.engine.vllm_face.metrics import (
    INTER_TOKEN_BUCKETS,
    ITERATION_TOKENS_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
    build_1_2_5_buckets,
)
from stagelens.sources.scrape.engine_source import VllmSource
from stagelens.sources.scrape.prometheus_text import parse_exposition

TINY_KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 4    # K and V, 2 layers, 2 KV heads, head_dim 16, float32
BLOCK = 16
MODEL = "tiny-served"


def _engine(model_dir, num_blocks: int = 12, **overrides) -> LLMEngine:
    """No chunked prefill, a budget of one long prompt, and 12 blocks: three 40+40-token requests fit when
    admitted and outgrow the cache as they decode, so the scheduler preempts one, deterministically."""
    settings = dict(model="tiny", model_dir=model_dir, max_model_len=128, max_num_batched_tokens=128,
                    enable_chunked_prefill=False, block_size=BLOCK,
                    kv_cache_memory=num_blocks * BLOCK * TINY_KV_BYTES_PER_TOKEN, device="cpu")
    settings.update(overrides)
    return LLMEngine(EngineConfig(**settings))


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        return response.read().decode()


def _scrape(face: VllmFace):
    return parse_exposition(_get(face.url + "/metrics"))


def _value(ex, name: str, **labels) -> float:
    family = ex.family(name)
    assert family is not None, name
    found = [s.value for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())
             and (s.name == name or s.name == name + "_total" or family.type != "counter")]
    assert len(found) == 1, (name, labels, family.samples)
    return found[0]


def _sample(ex, family_name: str, sample_name: str) -> float:
    return next(s.value for s in ex.family(family_name).samples if s.name == sample_name)


def _bounds(ex, name: str) -> list[float]:
    return [float(s.labels["le"]) for s in ex.family(name).samples if s.name == name + "_bucket"]


def _wait_until(condition, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(0.01)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _refuses(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2)
    except urllib.error.URLError:
        return True
    return False


class ScrapeAt:
    """An observer added after the face's: scrapes /metrics over HTTP (from the engine thread, the server
    answering on its own) at the first step `when(stats, batch)` holds, with the gauges already set."""

    def __init__(self, face: VllmFace, when) -> None:
        self.face, self.when, self.exposition, self.batch = face, when, None, None

    def on_step(self, engine, stats, batch):
        if self.exposition is None and self.when(stats, batch):
            self.exposition, self.batch = _scrape(self.face), dict(batch.waiting_reasons)


class OtlpHttpReceiver:
    """A minimal OTLP/HTTP traces endpoint: decodes each ExportTraceServiceRequest and keeps its spans."""

    def __init__(self) -> None:
        self.spans: list[tuple[dict, trace_pb2.Span]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    for rs in request.resource_spans:
                        resource = {kv.key: _any(kv.value) for kv in rs.resource.attributes}
                        for ss in rs.scope_spans:
                            receiver.spans.extend((resource, span) for span in ss.spans)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _any(value):
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def receiver():
    r = OtlpHttpReceiver()
    yield r
    r.close()


def _face_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name in ("vllm-face-metrics", "OtelBatchSpanRecordProcessor")]


def test_metrics_are_vllms_families_filled_as_vllm_fills_them_and_spans_match_each_request(model_dir, receiver):
    engine = _engine(model_dir)
    face = VllmFace(engine, served_model_name=MODEL, otlp_traces_endpoint=receiver.url).start()
    url = face.url
    at_preemption = ScrapeAt(face, lambda stats, batch: stats.num_preempted > 0)
    at_budget = ScrapeAt(face, lambda stats, batch: "token_budget" in batch.waiting_reasons.values())
    engine.add_observer(at_preemption)
    engine.add_observer(at_budget)
    ok = ([engine.submit([1 + i] * 40, SamplingParams(max_tokens=40)) for i in range(3)]
          + [engine.submit([9] * 100, SamplingParams(max_tokens=8)),                  # long: waits behind the budget
             engine.submit([4] * 10, SamplingParams(max_tokens=5, temperature=0.8, seed=1)),
             engine.submit([5] * 12, SamplingParams(max_tokens=6))])
    aborted = engine.submit([6] * 8, SamplingParams(max_tokens=4))
    timed_out = engine.submit([7] * 8, SamplingParams(max_tokens=4), timeout_s=1e-9)   # overdue at the first step
    engine.abort(aborted.request_id)
    engine.run_until_idle(60)
    requests = [*ok, aborted, timed_out]
    try:
        assert all(r.finish_reason == FinishReason.LENGTH for r in ok)
        assert (aborted.finish_reason, timed_out.finish_reason) == (FinishReason.ABORT, FinishReason.TIMEOUT)
        assert sum(r.num_preemptions for r in ok) >= 1
        ex = _scrape(face)
        base = {"model_name": MODEL, "engine": "0"}

        # (a) vLLM V1's families, types and label names
        kinds = {
            "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
            "vllm:num_requests_waiting_by_reason": "gauge", "vllm:kv_cache_usage_perc": "gauge",
            "vllm:cache_config_info": "gauge", "vllm:num_preemptions": "counter", "vllm:prompt_tokens": "counter",
            "vllm:generation_tokens": "counter", "vllm:request_success": "counter",
            "vllm:time_to_first_token_seconds": "histogram", "vllm:inter_token_latency_seconds": "histogram",
            "vllm:e2e_request_latency_seconds": "histogram", "vllm:request_queue_time_seconds": "histogram",
            "vllm:request_prefill_time_seconds": "histogram", "vllm:request_decode_time_seconds": "histogram",
            "vllm:request_inference_time_seconds": "histogram", "vllm:request_prompt_tokens": "histogram",
            "vllm:request_generation_tokens": "histogram", "vllm:iteration_tokens_total": "histogram",
        }
        for name, kind in kinds.items():
            family = ex.family(name)
            assert family is not None and family.type == kind, (name, family and family.type)
            for s in family.samples:
                if name != "vllm:cache_config_info":
                    assert s.labels["model_name"] == MODEL and s.labels["engine"] == "0", (name, s.labels)
        assert ex.family("vllm:num_preemptions_total") is not None        # exposed as vLLM's counter name
        assert ex.family("vllm:lora_requests_info") is None               # one model: no adapters
        assert {s.labels["reason"] for s in ex.family("vllm:num_requests_waiting_by_reason").samples} == \
            {"capacity", "deferred"}
        assert {s.labels["finished_reason"] for s in ex.family("vllm:request_success").samples} == \
            {"stop", "length", "abort", "error", "repetition"}

        # vLLM's bucket boundaries (+Inf added by the exposition)
        for name in ("vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                     "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                     "vllm:request_inference_time_seconds"):
            assert _bounds(ex, name) == [*REQUEST_LATENCY_BUCKETS, math.inf], name
        assert REQUEST_LATENCY_BUCKETS[0] == 0.3
        assert _bounds(ex, "vllm:time_to_first_token_seconds") == [*TTFT_BUCKETS, math.inf]
        assert _bounds(ex, "vllm:inter_token_latency_seconds") == [*INTER_TOKEN_BUCKETS, math.inf]
        assert _bounds(ex, "vllm:iteration_tokens_total") == [*ITERATION_TOKENS_BUCKETS, math.inf]
        assert build_1_2_5_buckets(128) == [1, 2, 5, 10, 20, 50, 100]
        assert _bounds(ex, "vllm:request_prompt_tokens") == [1, 2, 5, 10, 20, 50, 100, math.inf]

        # cache_config_info: gauge 1 carrying vLLM's CacheConfig fields as labels
        (info,) = ex.family("vllm:cache_config_info").samples
        assert info.value == 1.0
        assert info.labels["block_size"] == str(BLOCK) and info.labels["num_gpu_blocks"] == "12"
        assert info.labels["engine"] == "0"
        assert {"cache_dtype", "enable_prefix_caching", "gpu_memory_utilization"} <= set(info.labels)

        # counts match the requests run
        started = [r for r in requests if r.output_token_ids]
        assert started == ok
        for name in ("e2e_request_latency_seconds", "request_queue_time_seconds", "request_prefill_time_seconds",
                     "request_decode_time_seconds", "request_inference_time_seconds", "request_prompt_tokens",
                     "request_generation_tokens"):
            assert _sample(ex, f"vllm:{name}", f"vllm:{name}_count") == len(requests), name
        assert _value(ex, "vllm:request_success", finished_reason="length", **base) == len(ok)
        assert _value(ex, "vllm:request_success", finished_reason="abort", **base) == 2   # abort and timeout
        assert _value(ex, "vllm:request_success", finished_reason="stop", **base) == 0
        assert _value(ex, "vllm:prompt_tokens", **base) == sum(r.num_prompt_tokens for r in started)
        generated = sum(len(r.output_token_ids) for r in requests)
        assert _value(ex, "vllm:generation_tokens", **base) == generated
        assert _sample(ex, "vllm:request_prompt_tokens", "vllm:request_prompt_tokens_sum") == \
            sum(r.num_prompt_tokens for r in requests)
        assert _sample(ex, "vllm:request_generation_tokens", "vllm:request_generation_tokens_sum") == generated
        assert _sample(ex, "vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_count") == len(ok)
        assert _sample(ex, "vllm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds_count") == \
            generated - len(ok)
        # as vLLM: each step observes the prompt tokens counted in it plus the tokens it generated
        assert _sample(ex, "vllm:iteration_tokens_total", "vllm:iteration_tokens_total_sum") == \
            sum(r.num_prompt_tokens for r in started) + generated
        assert _value(ex, "vllm:num_preemptions", **base) == sum(r.num_preemptions for r in requests)
        # idle now: gauges say so
        assert _value(ex, "vllm:num_requests_running", **base) == 0
        assert _value(ex, "vllm:num_requests_waiting", **base) == 0
        assert _value(ex, "vllm:kv_cache_usage_perc", **base) == 0

        # mid-run: at the preemption the preempted request and those behind it wait for capacity
        mid = at_preemption.exposition
        assert mid is not None
        waiting = _value(mid, "vllm:num_requests_waiting", **base)
        assert waiting >= 1 and "preempted" in at_preemption.batch.values()
        assert _value(mid, "vllm:num_requests_waiting_by_reason", reason="capacity", **base) == waiting
        assert _value(mid, "vllm:num_requests_waiting_by_reason", reason="deferred", **base) == 0
        assert _value(mid, "vllm:num_preemptions", **base) >= 1
        assert 0 < _value(mid, "vllm:kv_cache_usage_perc", **base) <= 1
        assert _value(mid, "vllm:num_requests_running", **base) >= 1
        # behind the token budget: still vLLM's `capacity` (its waiting queue), the two reasons add up
        early = at_budget.exposition
        assert early is not None
        waiting = _value(early, "vllm:num_requests_waiting", **base)
        assert waiting >= 1
        assert _value(early, "vllm:num_requests_waiting_by_reason", reason="capacity", **base) + \
            _value(early, "vllm:num_requests_waiting_by_reason", reason="deferred", **base) == waiting

        # (c) one llm_request span per request, consistent with it
        assert face.spans.flush(10)
        with receiver.lock:
            spans = list(receiver.spans)
        assert len(spans) == len(requests)
        by_id = {}
        for resource, span in spans:
            assert resource["service.name"] == "vllm"
            assert span.name == "llm_request" and span.kind == trace_pb2.Span.SPAN_KIND_SERVER
            attrs = {kv.key: _any(kv.value) for kv in span.attributes}
            by_id[attrs["gen_ai.request.id"]] = (span, attrs)
        assert set(by_id) == {r.request_id for r in requests}
        clock = time.time() - time.monotonic()
        for r in requests:
            span, a = by_id[r.request_id]
            assert a["gen_ai.usage.prompt_tokens"] == r.num_prompt_tokens
            assert a["gen_ai.usage.completion_tokens"] == len(r.output_token_ids)
            assert a["gen_ai.response.model"] == r.model
            assert a["gen_ai.request.max_tokens"] == r.params.max_tokens
            assert json.loads(a["gen_ai.response.finish_reasons"]) == \
                ["length" if r in ok else "abort"]
            assert ("gen_ai.request.temperature" in a) == (r.params.temperature > 0)
            e2e = a["gen_ai.latency.e2e"]
            phases = a["gen_ai.latency.time_in_queue"] + a["gen_ai.latency.time_in_model_prefill"] + \
                a["gen_ai.latency.time_in_model_decode"]
            assert math.isclose(phases, e2e, rel_tol=1e-6)
            assert math.isclose(a["gen_ai.latency.time_in_model_inference"],
                                e2e - a["gen_ai.latency.time_in_queue"], rel_tol=1e-6, abs_tol=1e-9)
            assert math.isclose((span.end_time_unix_nano - span.start_time_unix_nano) / 1e9, e2e, abs_tol=1e-6)
            assert abs(span.start_time_unix_nano / 1e9 - (r.arrival_time + clock)) < 1.0   # epoch, not monotonic
            if r in ok:
                assert math.isclose(a["gen_ai.latency.time_to_first_token"],
                                    r.first_event_time("first_token") - r.arrival_time, rel_tol=1e-9)
            else:
                assert "gen_ai.latency.time_to_first_token" not in a
                assert a["gen_ai.latency.time_in_model_prefill"] == a["gen_ai.latency.time_in_model_decode"] == 0
    finally:
        face.stop()
        engine.stop()
    assert _refuses(url + "/metrics") and _face_threads() == []


def test_a_request_waiting_on_a_cold_model_is_deferred_and_extra_models_are_lora_adapters(model_dir):
    engine = _engine(model_dir, models=2, num_preload_models=1)
    face = VllmFace(engine, served_model_name=MODEL).start()
    loading = ScrapeAt(face, lambda stats, batch: "model_loading" in batch.waiting_reasons.values())
    engine.add_observer(loading)
    try:
        cold = engine.submit([3] * 10, SamplingParams(max_tokens=3), model="model-1")
        warm = engine.submit([4] * 10, SamplingParams(max_tokens=3))
        engine.run_until_idle(60)
        assert cold.finish_reason == warm.finish_reason == FinishReason.LENGTH
        mid = loading.exposition
        assert mid is not None
        base = {"model_name": MODEL, "engine": "0"}
        assert _value(mid, "vllm:num_requests_waiting_by_reason", reason="deferred", **base) == 1
        assert _value(mid, "vllm:num_requests_waiting_by_reason", reason="deferred", **base) + \
            _value(mid, "vllm:num_requests_waiting_by_reason", reason="capacity", **base) == \
            _value(mid, "vllm:num_requests_waiting", **base)
        lora = mid.family("vllm:lora_requests_info")
        assert lora is not None and lora.type == "gauge"
        waiting_adapters = {s.labels["waiting_lora_adapters"] for s in lora.samples}
        assert "model-1" in waiting_adapters
        assert all(s.labels["max_lora"] == "1" and s.value > 1e9 for s in lora.samples)   # a Unix timestamp
        assert {"running_lora_adapters", "waiting_lora_adapters", "max_lora"} == set(lora.samples[0].labels)
    finally:
        face.stop()
        engine.stop()


def test_vllm_source_attaches_to_the_face_of_a_running_engine_as_to_a_vllm_server(model_dir):
    engine = _engine(model_dir, num_blocks=32)     # room for the whole batch: no preemption, whatever the timing
    engine.start()
    face = VllmFace(engine, served_model_name=MODEL).start()    # attached to an engine already serving
    try:
        source = VllmSource(face.url, timeout_s=5)
        first = source.snapshot(time.monotonic())
        assert first.engine.model == MODEL and first.engine.block_size == BLOCK
        assert first.usage.num_blocks == 32
        batch = [engine.submit([1 + i] * (20 + 10 * i), SamplingParams(max_tokens=6)) for i in range(5)]
        for r in batch:
            assert r.wait(30)
        # the last step's gauges are set after the last request ended: wait for the idle reading
        _wait_until(lambda: _value(_scrape(face), "vllm:num_requests_running", model_name=MODEL, engine="0") == 0,
                    what="an idle engine")
        second = source.snapshot(time.monotonic())
        sched = second.window.scheduler
        assert second.window.span_s > 0
        assert sched.running == 0 and sched.waiting == 0
        assert sched.requests_finished == len(batch)
        # each quantile a value where vLLM's buckets place it, else said as their bound (its first: "< 0.3 s")
        for q in ("p50", "p99"):
            said = (second.inferred or {}).get(f"window.scheduler.wait_{q}_s")
            assert (getattr(sched, f"wait_{q}_s") is None) == (said is not None)
            assert said is None or said.startswith("< 0.3 s")
        assert sched.steps >= 1 and sched.decode_tokens_per_s > 0
        assert second.usage.num_blocks == 32 and second.usage.used_blocks == 0
        assert source.reading.kv_usage_ratio == 0
        assert source.reading.waiting_by_reason == {"capacity": 0, "deferred": 0}
        assert {"ttft_p50", "e2e_p99"} <= set(source.reading.said)
        assert second.counters.requests_finished_total == len(batch)
        assert second.counters.requests_failed_total == 0
        assert second.counters.preemptions_total == 0
    finally:
        face.stop()
        engine.stop()
    assert not any(name == "vllm-face-metrics" for name in _face_threads())
    assert _refuses(source.metrics_url)


def test_a_dead_otlp_endpoint_neither_blocks_nor_fails_the_engine(model_dir, caplog):
    # the agent's tracing quiets the OTLP exporters' log (agent/tracing/exporter.py); here it is the evidence
    caplog.set_level(logging.WARNING, logger="opentelemetry.exporter.otlp")
    engine = _engine(model_dir, num_blocks=16)
    engine.start()
    face = VllmFace(engine, served_model_name=MODEL, otlp_traces_endpoint=f"http://127.0.0.1:{_closed_port()}",
                    otlp_timeout_s=0.3, otlp_schedule_delay_s=0.02).start()
    try:
        requests = [engine.submit([2 + i] * 12, SamplingParams(max_tokens=5)) for i in range(4)]
        for r in requests:
            assert r.wait(30)
        assert all(r.finish_reason == FinishReason.LENGTH for r in requests)
        assert face.spans.spans == len(requests)
        assert face.spans.endpoint.endswith("/v1/traces")
        assert sum(engine.observer_errors.values()) == 0 and sum(engine.step_errors.values()) == 0
        more = engine.submit([3] * 12, SamplingParams(max_tokens=3))   # still serving after failed exports
        assert more.wait(30) and more.finish_reason == FinishReason.LENGTH
    finally:
        face.stop()
        engine.stop()
    assert _face_threads() == []
    assert any("Failed to export" in r.getMessage() for r in caplog.records)   # it did try, and failed


def test_start_and_stop_are_idempotent_and_leave_nothing_behind(model_dir, monkeypatch):
    engine = _engine(model_dir)
    face = VllmFace(engine)
    with pytest.raises(RuntimeError):
        _ = face.url
    face.start()
    url = face.url
    assert face.start().url == url
    assert face.metrics.model_name == "model-0"              # vLLM's served_model_name defaults to the model
    assert _get(url + "/metrics").startswith("# HELP")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url + "/other", timeout=5)
    assert err.value.code == 404
    face.stop()
    face.stop()
    assert engine._observers == ()
    assert _refuses(url + "/metrics") and _face_threads() == []

    # a KV-events endpoint that cannot be bound fails the start and leaves nothing behind
    broken = VllmFace(engine, kv_events_endpoint="bogus://nowhere")
    with pytest.raises(Exception, match="(?i)protocol|endpoint|invalid"):
        broken.start()
    assert not broken.started and engine._observers == () and _face_threads() == []
