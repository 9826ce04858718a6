"""`stagelens serve`: the agent and its HTTP API, optionally hosting the lab engine."""

from __future__ import annotations

import os

import click

from stagelens.commands.flags import (
    OUTSIDE_ENGINES,
    OutsideFlags,
    check_http_url,
    check_zmq_endpoint,
    diagnosis_config,
    diagnosis_options,
    engine_options,
    engine_url_option,
    interval_option,
    open_engine_source,
    parse_listen,
    token_options,
)
from stagelens.errors import UserError
from stagelens.lab.scenarios import SCENARIOS
from stagelens.numbers import Number

EXPORTERS = ("otlp-http", "otlp-grpc", "console", "jsonl", "none")


@click.command()
@click.option("--listen", default="127.0.0.1:9481", show_default=True,
              help="HOST:PORT to bind (loopback by default).")
@click.option("--engine", "engine_kind", type=click.Choice(["none", "lab", *OUTSIDE_ENGINES]), default="none",
              show_default=True, help="lab: host the bundled engine (and /v1/completions); vllm, "
              "sglang: read the engine at --engine-url from outside.")
@engine_url_option
@click.option("--scenario", type=click.Choice(list(SCENARIOS)),
              help="With --engine lab: run a scenario's workload.")
@click.option("--vllm-face", metavar="HOST:PORT", help="With --engine lab: the engine also speaks "
              "vLLM's interfaces, its /metrics here, so `--engine vllm --engine-url "
              "http://HOST:PORT` reads it as a vLLM server.")
@click.option("--vllm-face-otlp", metavar="URL", help="With --vllm-face: export vLLM's llm_request "
              "spans to this OTLP/HTTP endpoint (an agent's --otlp-receiver: "
              "http://HOST:PORT/v1/traces).")
@click.option("--vllm-face-kv-events", metavar="ENDPOINT", help="With --vllm-face: publish vLLM's "
              "KV events here (ZMQ PUB, e.g. tcp://127.0.0.1:5557).")
@engine_options
@diagnosis_options
@interval_option()
@token_options
@click.option("--otel-exporter", type=click.Choice(EXPORTERS),
              help="Trace exporter [OTEL_TRACES_EXPORTER; otlp-http when an OTLP endpoint is set, else none].")
@click.option("--otel-endpoint", help="OTLP endpoint [OTEL_EXPORTER_OTLP_ENDPOINT].")
@click.option("--otel-jsonl", type=click.Path(dir_okay=False),
              help="With --otel-exporter jsonl: the file.")
@click.option("--vllm-metric-names", is_flag=True,
              help="Also export vLLM-named metrics (vLLM's meaning).")
@click.option("--request-timeout", type=Number(min=0, max=86400.0, min_open=True, unit="s"),
              default=600.0, show_default=True,
              help="With --engine lab: seconds a completion may take before it fails (504).")
@click.option("--shutdown-grace", type=Number(min=0, max=3600.0, unit="s"), default=10.0,
              show_default=True,
              help="On SIGTERM/SIGINT: seconds requests in flight get to finish before they are cancelled.")
@click.option("--history", type=Number(min=10, max=100000, integer=True, unit="frames"),
              default=900, show_default=True,
              help="Frames kept in memory for /api/v1/frames and the TUI (900: 15 min at 1 s).")
@click.option("--max-connections", type=Number(min=1, max=65536, integer=True, unit="connections"),
              default=1024, show_default=True, help="Connections served at once; more get 503.")
@click.pass_context
def serve(ctx: click.Context, listen: str, engine_kind: str, outside: OutsideFlags,
          scenario: str | None, vllm_face: str | None, vllm_face_otlp: str | None,
          vllm_face_kv_events: str | None, config_path, thresholds, interval: float,
          token: str | None, otel_exporter: str | None, otel_endpoint: str | None,
          otel_jsonl: str | None, vllm_metric_names: bool, request_timeout: float,
          shutdown_grace: float, history: int, max_connections: int, **flags) -> int:
    """Serve /metrics, /api/v1/... and /healthz (OpenAPI docs at /docs). SIGTERM or SIGINT stops it
    gracefully (exit 0)."""
    import prometheus_client

    from stagelens.long_running import hand_over_the_gil_sooner, limit_malloc_arenas, settle_collector
    from stagelens.runtime import AgentRuntime, LabSettings
    from stagelens.server.app import create_app
    from stagelens.server.http_server import listen_socket, serve_until_stopped

    prometheus_client.disable_created_metrics()   # `_created` series only double every counter
    if engine_kind != "lab":    # a hosted lab engine's step loop keeps the default switch interval
        hand_over_the_gil_sooner()
    limit_malloc_arenas()      # before any receiver's or the server's thread starts
    host, port = parse_listen(listen)
    if scenario and engine_kind != "lab":
        raise UserError("--scenario needs --engine lab")
    engine_source = open_engine_source(engine_kind, outside)
    face = _face_settings(engine_kind, vllm_face, vllm_face_otlp, vllm_face_kv_events)
    lab = LabSettings({k: v for k, v in flags.items() if v is not None}, scenario, face) \
        if engine_kind == "lab" else None
    if lab:
        from stagelens.lab.settings import scenario_configs

        scenario_configs(lab.flags, scenario)   # bad flags fail now, not later
    sock = listen_socket(host, port)
    runtime = AgentRuntime(diagnosis_config(config_path, thresholds), interval,
                           (ctx.obj or {}).get("nvml_snapshot"), lab=lab,
                           engine_source=engine_source, vllm_names=vllm_metric_names,
                           request_timeout=request_timeout, history=history)
    runtime.tracer = _tracer(otel_exporter, otel_endpoint, otel_jsonl, runtime.metrics.registry)
    runtime.start()
    # what serving needs is loaded and started: out of every collection from now on
    settle_collector()
    click.echo(f"stagelens serving on http://{host}:{port} (engine: {engine_kind}"
               f"{', scenario ' + scenario if scenario else ''}; docs at /docs)", err=True)
    serve_until_stopped(create_app(runtime, token), sock, runtime, shutdown_grace, max_connections)
    click.echo("stagelens: stopped", err=True)
    return 0


def _face_settings(engine_kind: str, listen: str | None, otlp: str | None, kv_events: str | None) -> dict | None:
    """VllmFace's settings from `--vllm-face*`; UserError for one given without what it needs."""
    if not listen:
        if otlp or kv_events:
            raise UserError("--vllm-face-otlp and --vllm-face-kv-events need --vllm-face HOST:PORT")
        return None
    if engine_kind != "lab":
        raise UserError("--vllm-face needs --engine lab: it is the bundled engine that speaks vLLM's interfaces")
    host, port = parse_listen(listen, "--vllm-face")
    if otlp:
        check_http_url("--vllm-face-otlp", otlp)
    if kv_events:
        check_zmq_endpoint("--vllm-face-kv-events", kv_events)
    return {"host": host, "port": port, "otlp_traces_endpoint": otlp,
            "kv_events_endpoint": kv_events}


def _tracer(exporter: str | None, endpoint: str | None, jsonl: str | None, registry):
    from stagelens.tracing import TraceExporter

    configured = exporter or os.environ.get("OTEL_TRACES_EXPORTER")
    if configured is None:
        has_endpoint = endpoint or any(os.environ.get(k) for k in ("OTEL_EXPORTER_OTLP_ENDPOINT",
                                                                   "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        exporter = "otlp-http" if has_endpoint else "none"
    settings = {"exporter": exporter, "endpoint": endpoint, "jsonl_path": jsonl}
    return TraceExporter.from_env({k: v for k, v in settings.items() if v is not None},
                                  registry=registry)
