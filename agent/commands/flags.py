"""The flags the commands share, each with what reads it: HOST:PORT, `--interval`, the
diagnosis's, the engine's and workload's, `serve`'s bearer token, and `--engine-url` with what
comes with it."""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, fields
from urllib.parse import urlsplit

import click

from stagelens.bounded_read import read_bounded
from stagelens.diagnosis import DiagnosisConfig, load_config
from stagelens.errors import UserError
from stagelens.http_client import redact_url
from stagelens.lab.flag_values import FLAG_VALUES
from stagelens.numbers import Number

# HOST:PORT as the flags that bind a socket take it (`serve --listen`, `--otlp-receiver`).

def parse_listen(text: str, flag: str = "--listen") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UserError(f"{flag}: expected HOST:PORT (e.g. 127.0.0.1:9481), got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


# `--interval`: seconds between samples (the TUI: between refreshes), for every command that
# samples.

# Faster than 10 a second the sampler's own work shows in the engine's figures; slower than an hour
# no window of the diagnosis would ever hold two samples.
INTERVAL = Number(min=0.1, max=3600.0, unit="s")


def interval_option(default: float = 1.0, help: str = "Sampling interval in seconds."):
    return click.option("--interval", type=INTERVAL, default=default, show_default=True, help=help)


# Flags that tune the diagnosis, shared by `lab`, `diagnose`, `serve` and `tui`.

_DIAGNOSIS_OPTIONS = [
    click.option("--config", "config_path", type=click.Path(dir_okay=False),
                 help="TOML file with thresholds and hysteresis ([diagnosis], [thresholds.SIGNAL])."),
    click.option("--threshold", "thresholds", multiple=True, metavar="SIGNAL=WARN:FIRING",
                 help="Override one signal's thresholds; repeatable."),
]


def diagnosis_options(func):
    for option in reversed(_DIAGNOSIS_OPTIONS):
        func = option(func)
    return func


def diagnosis_config(config_path: str | None, thresholds: tuple[str, ...]) -> DiagnosisConfig:
    return load_config(config_path, thresholds)


# The engine and workload flags, shared by `lab`, `serve --engine lab`, `record`, `tui` and `bench`;
# the settings they build are agent/lab/settings.py's. Named like vLLM's and the report's. Every
# default is None here, so a scenario can supply its own and whatever the user typed wins over both.

def _typed(flag: str, help: str):
    """A flag whose value is read by its entry in the flag table (agent/lab/flag_values.py): a bad
    value fails as the flag is read, in the words what-if's `--set` says it in."""
    return click.option(flag, type=FLAG_VALUES[flag[2:].replace("-", "_")], help=help)


_ENGINE_OPTIONS = [
    _typed("--model", help="Model size preset [small]."),
    _typed("--models", help="Models registered, and the workload spread over them [1]."),
    _typed("--block-size", help="Tokens per KV block, a power of two [16]."),
    _typed("--max-num-seqs", help="Most requests running at once: the batch size [16]."),
    _typed("--max-num-batched-tokens", help="Token budget per step [512 chunked, else 2048]."),
    click.option("--enable-chunked-prefill/--no-enable-chunked-prefill", default=None,
                 help="Split long prefills across steps and mix them with decodes [on]."),
    _typed("--long-prefill-token-threshold",
             help="With chunked prefill, most prefill tokens one request gets per step; 0 for no cap [0]."),
    _typed("--num-preload-models", help="Models loaded before serving starts [1]."),
    _typed("--max-resident-models", help="Models kept resident at once [all]."),
    _typed("--allocator", help="KV allocator [paged]."),
    _typed("--policy", help="Order of admission from the queue [fcfs]."),
    _typed("--max-model-len", help="Longest sequence, prompt plus output [2048]."),
    _typed("--kv-cache-memory", help="KV cache size in bytes; 256MiB, 1GB accepted [128MiB]."),
    click.option("--device", help="cpu, cuda, cuda:N, mps or auto [auto]."),
    _typed("--dtype", help="Weights and KV dtype [auto: float32 on CPU]."),
    click.option("--model-dir", type=click.Path(file_okay=False),
                 help="Where weight files are kept."),
    _typed("--rate", help="Open-loop arrivals, requests per second [2]."),
    _typed("--concurrency", help="Closed loop with this many requests in flight."),
    click.option("--prompt-len",
                 help="N, uniform:A:B or lognormal:MEDIAN:SIGMA [lognormal:160:0.6]."),
    click.option("--output-len", help="N, uniform:A:B or lognormal:MEDIAN:SIGMA [uniform:16:64]."),
    _typed("--long-prompt-share", help="Share of requests with a long prompt [0]."),
    _typed("--long-prompt-len", help="Tokens in a long prompt [1536]."),
    _typed("--duration", help="Seconds of arrivals [30]."),
    _typed("--seed", help="Seed of weights and workload [0]."),
    _typed("--temperature", help="Sampling temperature, 0 for greedy [0]."),
]


def engine_options(func):
    """Adds every engine and workload flag to a click command."""
    for option in reversed(_ENGINE_OPTIONS):
        func = option(func)
    return func


# `serve`'s bearer token: from STAGELENS_TOKEN or a file, so it never has to be on the command line,
# where every user of the machine reads it in `ps` (and /proc/PID/cmdline).

MAX_TOKEN_FILE_BYTES = 4096

_TOKEN_OPTIONS = (
    click.option("--token", envvar="STAGELENS_TOKEN", help="Bearer token for the endpoints that "
                 "change state. Prefer STAGELENS_TOKEN or --token-file: on the command line it "
                 "shows in `ps`."),
    click.option("--token-file", type=click.Path(dir_okay=False), help="Read the bearer token from "
                 "this file (its first line; e.g. a mounted Kubernetes Secret)."),
)


def token_options(func):
    """`--token` and `--token-file`, handed to the command as one `token: str | None`."""
    @functools.wraps(func)
    def command(*args, **kwargs):
        kwargs["token"] = resolve_token(kwargs.pop("token"), kwargs.pop("token_file"))
        return func(*args, **kwargs)

    for option in reversed(_TOKEN_OPTIONS):
        command = option(command)
    return command


def resolve_token(token: str | None, token_file: str | None) -> str | None:
    """The token given, read from its file where one is named; UserError for both given, an
    unreadable or empty file. A token typed on the command line is taken, with a warning that
    others can read it."""
    ctx = click.get_current_context(silent=True)
    if token_file is not None:
        if token:
            raise UserError("--token-file and --token (or STAGELENS_TOKEN): give one of them")
        return _read_token_file(token_file)
    if token and ctx is not None and ctx.get_parameter_source("token") == click.core.ParameterSource.COMMANDLINE:
        click.echo("stagelens: warning: --token on the command line is readable by every user of "
                   "this machine (ps); use STAGELENS_TOKEN or --token-file", err=True)
    return token or None


def _read_token_file(path: str) -> str:
    data = read_bounded(path, MAX_TOKEN_FILE_BYTES,
                        f"--token-file {path}: cannot read it ({{error}})",
                        f"--token-file {path}: larger than {MAX_TOKEN_FILE_BYTES} bytes: not a token")
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise UserError(f"--token-file {path}: not UTF-8 text") from None
    token = lines[0].strip() if lines else ""
    if not token:
        raise UserError(f"--token-file {path}: empty: no token in it")
    return token


# `--engine-url` and what comes with it: attach to an engine serving on its own (vLLM, SGLang) and
# read it from outside (agent/sources): its /metrics each tick, its per-request spans where it
# exports them to the agent (`--otlp-receiver`), its KV events where it publishes them
# (`--kv-events`).

OUTSIDE_ENGINES = ("vllm", "sglang")
# an engine's name: a Prometheus label value and a path segment as it is
ENGINE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


@dataclass(frozen=True)
class OutsideFlags:
    """What the command line says of an engine read from outside; every field None when nothing."""
    engine_url: str | None = None
    otlp_receiver: str | None = None
    otlp_receiver_grpc: str | None = None
    otlp_forward: str | None = None
    kv_events: str | None = None
    # every --engine-url given, as given (`diagnose` reads several; the first is `engine_url`)
    engine_urls: tuple[str, ...] = ()


_ENGINE_URL_OPTIONS = (
    click.option("--engine-url", "engine_urls", multiple=True, metavar="[[NAME=]KIND=]URL",
                 help="With --engine vllm or sglang: the engine's base URL (its /metrics is read "
                 "each tick), e.g. http://127.0.0.1:8000; KIND=URL names its kind, NAME=KIND=URL "
                 "its name too. `diagnose` takes it more than once: each engine judged on its "
                 "own."),
    click.option("--otlp-receiver", metavar="HOST:PORT", help="With --engine-url: receive the "
                 "engine's OTLP traces over HTTP here (vLLM: --otlp-traces-endpoint "
                 "http://HOST:PORT/v1/traces with "
                 "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf), one timeline per llm_request "
                 "span."),
    click.option("--otlp-receiver-grpc", metavar="HOST:PORT", help="With --engine-url: the same "
                 "over gRPC, vLLM's default protocol (vLLM: --otlp-traces-endpoint HOST:PORT with "
                 "OTEL_EXPORTER_OTLP_TRACES_INSECURE=true: the receiver speaks plaintext)."),
    click.option("--otlp-forward", metavar="URL", help="With a receiver: send every trace received "
                 "on, unchanged, to this OTLP/HTTP endpoint (your collector's /v1/traces)."),
    click.option("--kv-events", metavar="ENDPOINT", help="With --engine vllm: subscribe to the "
                 "engine's KV events (vLLM: --kv-events-config with this endpoint), e.g. "
                 "tcp://127.0.0.1:5557."),
)


# the command's parameters the options above fill
_OPTION_NAMES = ("engine_urls", *(f.name for f in fields(OutsideFlags)
                                  if not f.name.startswith("engine_url")))


def outside_flags(params: dict) -> OutsideFlags:
    """The OutsideFlags of a command's parsed parameters (click's, by the options' names)."""
    urls = tuple(params["engine_urls"])
    given = {name: params[name] for name in _OPTION_NAMES if name != "engine_urls"}
    return OutsideFlags(urls[0] if urls else None, **given, engine_urls=urls)


def engine_url_option(func):
    """The options of an engine read from outside, handed to the command as one `outside:
    OutsideFlags`."""
    @functools.wraps(func)
    def command(*args, **kwargs):
        kwargs["outside"] = outside_flags(kwargs)
        for name in _OPTION_NAMES:
            del kwargs[name]
        return func(*args, **kwargs)

    for option in reversed(_ENGINE_URL_OPTIONS):
        command = option(command)
    return command


def open_engine_source(kind: str, outside: OutsideFlags = OutsideFlags()):
    """The engine source for `--engine KIND --engine-url URL` (and its span receiver and
    KV-events subscriber, started with the source); None for an engine not read from outside.
    UserError for a flag missing, given without what it needs, or malformed. Its scrape has a
    deadline of its own, fit for a busy engine
    (agent.sources.scrape.engine_source.SCRAPE_TIMEOUT_S), not the sampling interval: a frame
    waits for the engine's answer, at most that long."""
    if len(outside.engine_urls) > 1:
        raise UserError("--engine-url more than once: this command watches one engine (`stagelens "
                        "diagnose` judges several)")
    o = outside
    if o.engine_url:
        _name, kind, url = engine_spec(o.engine_url, kind)
        o = dataclasses.replace(o, engine_url=url)
    if kind not in OUTSIDE_ENGINES:
        for flag, value in (("--engine-url", o.engine_url), ("--otlp-receiver", o.otlp_receiver),
                            ("--otlp-receiver-grpc", o.otlp_receiver_grpc),
                            ("--kv-events", o.kv_events)):
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
        from stagelens.sources.kv_events.subscriber import KvEventsSubscriber

        subscriber = KvEventsSubscriber(o.kv_events)
    from stagelens.sources.scrape.engine_source import SCRAPE_TIMEOUT_S, VllmSource
    from stagelens.sources.scrape.gauge_poll import POLL_S

    return VllmSource(o.engine_url, timeout_s=SCRAPE_TIMEOUT_S, kind=kind, spans=spans,
                      kv_events=subscriber, poll_s=POLL_S)


def engine_spec(text: str, kind: str) -> tuple[str | None, str, str]:
    """(name or None, kind, URL) of an `--engine-url [[NAME=]KIND=]URL`; the kind is `kind`
    (--engine's) where the flag names none. UserError for a kind no engine has or a name that
    is not a label value."""
    head, sep, rest = text.partition("://")
    if not sep or "=" not in head:
        return None, kind, text
    *names, scheme = head.split("=")
    url = f"{scheme}://{rest}"
    if len(names) > 2:
        raise UserError(f"--engine-url: expected [[NAME=]KIND=]URL, got {redact_url(text)!r}")
    named_kind = names[-1]
    if named_kind not in OUTSIDE_ENGINES:
        raise UserError(f"--engine-url: {named_kind!r} is no engine kind "
                        f"({', '.join(OUTSIDE_ENGINES)})")
    if kind in OUTSIDE_ENGINES and kind != named_kind:
        raise UserError(f"--engine-url {named_kind}=...: --engine says {kind}")
    name = names[0] if len(names) == 2 else None
    if name is not None and not ENGINE_NAME.fullmatch(name):
        raise UserError(f"--engine-url: the name {name!r} must be letters, digits, '.', '_' or "
                        f"'-' (1 to 63 of them): it becomes a label value")
    return name, named_kind, url


def _receiver(http: str | None, grpc: str | None, forward: str | None):
    from stagelens.sources.otlp.receiver import OtlpReceiver

    http_host, http_port = parse_listen(http, "--otlp-receiver") if http else (None, None)
    grpc_host, grpc_port = parse_listen(grpc, "--otlp-receiver-grpc") if grpc else (None, None)
    if http and grpc and http_host != grpc_host:
        raise UserError("--otlp-receiver and --otlp-receiver-grpc: one host for both, please")
    return OtlpReceiver(host=http_host or grpc_host, http_port=http_port, grpc_port=grpc_port,
                        forward_to=forward)


def check_http_url(flag: str, url: str) -> None:
    """UserError naming `flag` unless `url` is http(s)://HOST[:PORT] (a path allowed;
    `user:password@` too, used and never shown)."""
    parts = urlsplit(url)
    try:
        parts.port    # noqa: B018  (reading it checks it)
    except ValueError:
        raise UserError(f"{flag}: bad port in {redact_url(url)!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{flag}: expected http(s)://HOST[:PORT], got {redact_url(url)!r}")


def check_zmq_endpoint(flag: str, endpoint: str) -> None:
    """UserError naming `flag` unless `endpoint` is a ZMQ endpoint KV events travel on (tcp:// or
    ipc://)."""
    if not endpoint.startswith(("tcp://", "ipc://")):
        raise UserError(f"{flag}: expected tcp://HOST:PORT or ipc://PATH, got {endpoint!r}")
