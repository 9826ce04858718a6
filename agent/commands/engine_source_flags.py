"""`--engine-url` and what comes with it: attach to an engine serving on its own (vLLM, SGLang) and read it
from outside (agent/sources): its /metrics each tick, its per-request spans where it exports them to the
agent (`--otlp-receiver`), its KV events where it publishes them (`--kv-events`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from urllib.parse import urlsplit

import click

from agent.errors import UserError
from agent.http_get import redact_url

OUTSIDE_ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class OutsideFlags:
    """What the command line says of an engine read from outside; every field None when nothing."""
    engine_url: str | None = None
    otlp_receiver: str | None = None
    otlp_receiver_grpc: str | None = None
    otlp_forward: str | None = None
    kv_events: str | None = None


_OPTIONS = (
    click.option("--engine-url", help="With --engine vllm or sglang: the engine's base URL (its /metrics is "
                 "read each tick), e.g. http://127.0.0.1:8000."),
    click.option("--otlp-receiver", metavar="HOST:PORT", help="With --engine-url: receive the engine's OTLP traces "
                 "over HTTP here (vLLM: --otlp-traces-endpoint http://HOST:PORT/v1/traces with "
                 "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf), one timeline per llm_request span."),
    click.option("--otlp-receiver-grpc", metavar="HOST:PORT", help="With --engine-url: the same over gRPC, vLLM's "
                 "default protocol (vLLM: --otlp-traces-endpoint HOST:PORT with "
                 "OTEL_EXPORTER_OTLP_TRACES_INSECURE=true: the receiver speaks plaintext)."),
    click.option("--otlp-forward", metavar="URL", help="With a receiver: send every trace received on, unchanged, "
                 "to this OTLP/HTTP endpoint (your collector's /v1/traces)."),
    click.option("--kv-events", metavar="ENDPOINT", help="With --engine vllm: subscribe to the engine's KV events "
                 "(vLLM: --kv-events-config with this endpoint), e.g. tcp://127.0.0.1:5557."),
)


def engine_url_option(func):
    """The options of an engine read from outside, handed to the command as one `outside: OutsideFlags`."""
    @functools.wraps(func)
    def command(*args, **kwargs):
        kwargs["outside"] = OutsideFlags(**{f.name: kwargs.pop(f.name) for f in fields(OutsideFlags)})
        return func(*args, **kwargs)

    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def open_engine_source(kind: str, outside: OutsideFlags = OutsideFlags(), interval: float = 1.0):
    """The engine source for `--engine KIND --engine-url URL` (and its span receiver and KV-events
    subscriber, started with the source); None for an engine not read from outside. UserError for a flag
    missing, given without what it needs, or malformed. Its scrape has at most the sampling interval: an
    engine slow to answer (or dripping its answer) delays each frame by one interval at most."""
    o = outside
    if kind not in OUTSIDE_ENGINES:
        for flag, value in (("--engine-url", o.engine_url), ("--otlp-receiver", o.otlp_receiver),
                            ("--otlp-receiver-grpc", o.otlp_receiver_grpc), ("--kv-events", o.kv_events)):
            if value:
                raise UserError(f"{flag} needs --engine {' or '.join(OUTSIDE_ENGINES)}")
    elif not o.engine_url:
        raise UserError(f"--engine {kind} needs --engine-url (e.g. http://127.0.0.1:8000)")
    else:
        check_http_url("--engine-url", o.engine_url)
    receiving = o.otlp_receiver or o.otlp_receiver_grpc
    if o.otlp_forward and not receiving:
        raise UserError("--otlp-forward needs --otlp-receiver or --otlp-receiver-grpc")
    if kind not in OUTSIDE_ENGINES:
        return None
    if o.otlp_forward:
        check_http_url("--otlp-forward", o.otlp_forward)
    if o.kv_events and kind != "vllm":
        raise UserError("--kv-events needs --engine vllm (SGLang publishes no KV events)")
    if o.kv_events:
        check_zmq_endpoint("--kv-events", o.kv_events)
    spans = _receiver(o.otlp_receiver, o.otlp_receiver_grpc, o.otlp_forward) if receiving else None
    subscriber = None
    if o.kv_events:
        from agent.sources.kv_events_subscriber import KvEventsSubscriber

        subscriber = KvEventsSubscriber(o.kv_events)
    from agent.sources.gauge_poll import POLL_S
    from agent.sources.vllm import SCRAPE_TIMEOUT_S, VllmSource

    return VllmSource(o.engine_url, timeout_s=min(SCRAPE_TIMEOUT_S, interval), kind=kind, spans=spans,
                      kv_events=subscriber, poll_s=POLL_S)


def _receiver(http: str | None, grpc: str | None, forward: str | None):
    from agent.commands.listen import parse_listen
    from agent.sources.otlp_receiver import OtlpReceiver

    http_host, http_port = parse_listen(http, "--otlp-receiver") if http else (None, None)
    grpc_host, grpc_port = parse_listen(grpc, "--otlp-receiver-grpc") if grpc else (None, None)
    if http and grpc and http_host != grpc_host:
        raise UserError("--otlp-receiver and --otlp-receiver-grpc: one host for both, please")
    return OtlpReceiver(host=http_host or grpc_host, http_port=http_port, grpc_port=grpc_port, forward_to=forward)


def check_http_url(flag: str, url: str) -> None:
    """UserError naming `flag` unless `url` is http(s)://HOST[:PORT] (a path allowed; `user:password@` too, used
    and never shown)."""
    parts = urlsplit(url)
    try:
        parts.port    # noqa: B018  (reading it checks it)
    except ValueError:
        raise UserError(f"{flag}: bad port in {redact_url(url)!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{flag}: expected http(s)://HOST[:PORT], got {redact_url(url)!r}")


def check_zmq_endpoint(flag: str, endpoint: str) -> None:
    """UserError naming `flag` unless `endpoint` is a ZMQ endpoint KV events travel on (tcp:// or ipc://)."""
    if not endpoint.startswith(("tcp://", "ipc://")):
        raise UserError(f"{flag}: expected tcp://HOST:PORT or ipc://PATH, got {endpoint!r}")
