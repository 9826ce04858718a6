"""Exporter selection, OTEL_* variables, the JSON-lines exporter, bad config as one-line UserErrors."""

from __future__ import annotations

import json

import pytest

from stagelens.errors import UserError
from stagelens.tracing import TraceExporter, TracingConfig
from tests.helpers.tracing_support import OFFSET, clear_otel_env, preempted_timeline, small_timeline

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    clear_otel_env(monkeypatch)


def jsonl_exporter(path, **extra):
    return TraceExporter.from_env({"exporter": "jsonl", "jsonl_path": str(path), **extra}, offset=OFFSET)


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_jsonl_writes_one_parseable_object_per_span(tmp_path):
    path = tmp_path / "traces.jsonl"
    exporter = jsonl_exporter(path)
    try:
        trace_id = exporter.export_timeline(preempted_timeline(), traceparent=TRACEPARENT)
        assert exporter.flush(5)
    finally:
        exporter.shutdown()
    records = read_lines(path)
    assert len(records) == 9
    root = next(r for r in records if r["name"] == "llm_request")
    assert root["trace_id"] == trace_id and root["parent_span_id"] == "b7ad6b7169203331"
    assert root["kind"] == "SERVER" and root["status"]["code"] == "UNSET"
    assert root["start_time_unix_nano"] == OFFSET.to_epoch_ns(100.0)
    assert root["end_time_unix_nano"] == OFFSET.to_epoch_ns(100.5)
    assert root["attributes"]["gen_ai.request.id"] == "req-1"
    assert root["attributes"]["gen_ai.response.finish_reasons"] == ["length"]
    assert root["service_name"] == "stagelens"
    for r in records:
        assert set(r) >= {"name", "trace_id", "span_id", "parent_span_id", "start_time_unix_nano",
                          "end_time_unix_nano", "attributes", "kind", "status"}
        assert len(r["span_id"]) == 16 and r["trace_id"] == trace_id
        if r is not root:
            assert r["parent_span_id"] == root["span_id"] and r["kind"] == "INTERNAL"


def test_jsonl_appends_across_restarts(tmp_path):
    path = tmp_path / "traces.jsonl"
    for i in range(2):
        exporter = jsonl_exporter(path)
        exporter.export_timeline(small_timeline(f"r{i}"))
        exporter.shutdown()
    assert len(read_lines(path)) == 8


def test_service_name_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gpu-node-7")
    exporter = jsonl_exporter(tmp_path / "t.jsonl", service_name="ignored-when-env-names-one")
    exporter.export_timeline(small_timeline("r1"))
    exporter.shutdown()
    assert exporter.resource.attributes["service.name"] == "gpu-node-7"
    assert {r["service_name"] for r in read_lines(tmp_path / "t.jsonl")} == {"gpu-node-7"}


def test_service_name_defaults(tmp_path, monkeypatch):
    exporter = jsonl_exporter(tmp_path / "a.jsonl")
    assert exporter.resource.attributes["service.name"] == "stagelens"
    exporter.shutdown()
    exporter = jsonl_exporter(tmp_path / "b.jsonl", service_name="agent-b")
    assert exporter.resource.attributes["service.name"] == "agent-b"
    exporter.shutdown()
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs,deployment.environment=lab")
    exporter = jsonl_exporter(tmp_path / "c.jsonl")
    assert exporter.resource.attributes["service.name"] == "from-attrs"
    assert exporter.resource.attributes["deployment.environment"] == "lab"
    exporter.shutdown()


@pytest.mark.parametrize("sampler,arg", [("always_off", None), ("traceidratio", "0"),
                                         ("parentbased_traceidratio", "0")])
def test_sampled_out_records_nothing(tmp_path, monkeypatch, sampler, arg):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    if arg is not None:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", arg)
    path = tmp_path / "t.jsonl"
    exporter = jsonl_exporter(path)
    try:
        assert exporter.export_timeline(preempted_timeline()) is None
        assert exporter.flush(5)
        stats = exporter.stats()
    finally:
        exporter.shutdown()
    assert path.read_text() == ""
    assert stats["sampled_out"] == 1 and stats["submitted"] == stats["exported"] == 0


def test_always_on_from_env_ignores_an_unsampled_parent(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    exporter = jsonl_exporter(tmp_path / "t.jsonl")
    assert exporter.export_timeline(small_timeline("r1"), traceparent=TRACEPARENT[:-2] + "00") is not None
    exporter.shutdown()


@pytest.mark.parametrize("env,expected", [
    ({}, "otlp-http"),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp-http"),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "otlp-grpc"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, "otlp-http"),
    ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
    ({"OTEL_TRACES_EXPORTER": " None "}, "none"),
])
def test_exporter_from_env(monkeypatch, env, expected):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    exporter = TraceExporter.from_env()
    try:
        assert exporter.name == expected
    finally:
        exporter.shutdown()


def test_config_wins_over_env(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    exporter = TraceExporter.from_env(TracingConfig(exporter="jsonl", jsonl_path=str(tmp_path / "t.jsonl")))
    assert exporter.name == "jsonl"
    exporter.shutdown()


def test_none_exporter_records_nothing():
    exporter = TraceExporter.from_env({"exporter": "none"})
    assert exporter.export_timeline(preempted_timeline()) is None
    assert exporter.flush(1)
    exporter.shutdown()
    assert exporter.stats()["submitted"] == 0


def test_console_exporter_prints_spans(capsys):
    exporter = TraceExporter.from_env({"exporter": "console"}, offset=OFFSET)
    exporter.export_timeline(small_timeline("r-console"))
    exporter.shutdown()
    out = capsys.readouterr().out
    assert out.count('"name": "llm_request"') == 1 and "r-console" in out


@pytest.mark.parametrize("config,env,message", [
    ({"exporter": "zipkin"}, {}, "unknown trace exporter 'zipkin'"),
    ({}, {"OTEL_TRACES_EXPORTER": "jaeger"}, "unknown trace exporter 'jaeger' (OTEL_TRACES_EXPORTER)"),
    ({}, {"OTEL_TRACES_EXPORTER": "otlp,console"}, "stagelens uses one at a time"),
    ({}, {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTLP protocol 'http/json' is not supported"),
    ({"exporter": "jsonl"}, {}, "the jsonl trace exporter needs jsonl_path"),
    ({"exporter": "jsonl", "jsonl_path": "/nonexistent-dir/x/traces.jsonl"}, {}, "cannot write trace file"),
    ({"exporter": "otlp-http", "endpoint": "collector:4318"}, {}, "must be an http:// or https:// URL"),
    ({"exporter": "console", "max_queue_size": 0}, {}, "max_queue_size must be a positive integer"),
    ({"exporter": "console", "export_timeout_s": -1}, {}, "export_timeout_s must be a positive number"),
    ({"exporter": "console", "exportr": "x"}, {}, "unknown tracing setting(s) exportr"),
])
def test_bad_config_is_a_user_error(monkeypatch, config, env, message):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(UserError) as err:
        TraceExporter.from_env(config)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_jsonl_path_that_is_a_directory(tmp_path):
    with pytest.raises(UserError, match="cannot write trace file"):
        TraceExporter.from_env({"exporter": "jsonl", "jsonl_path": str(tmp_path)})


def test_http_endpoint_gets_the_traces_path():
    from stagelens.tracing.config import _http_traces_url

    assert _http_traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert _http_traces_url("http://c:4318/") == "http://c:4318/v1/traces"
    assert _http_traces_url("https://c/otlp/v1/traces") == "https://c/otlp/v1/traces"
