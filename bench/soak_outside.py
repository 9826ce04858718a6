"""Soak, outside mode (`python bench/soak.py --outside`): `stagelens serve --engine vllm` fed for 10 minutes by
a misbehaving engine, span sender and KV publisher, each doing issue 24's hostile things interleaved with
normal traffic; prints the agent's RSS over time against the DaemonSet's memory limit, its /metrics p99
(target <= 10 ms) beside a do-nothing HTTP server's (the machine's floor, scraped in turn with the agent), the
oldest frame age (target <= 3 intervals) and the normal spans lost (target 0).

- the engine's /metrics (a loopback server, the vLLM exposition fixture): half the scrapes normal, the rest a
  body or headers dripped a byte every 0.5 s, 450k series (26 MB), a body near the caps (7.8 MB, 19,400
  series: under them, its parse past its deadline), a negative gauge, num_gpu_blocks 2e29, a duplicated
  series, a redirect to another host, a redirect loop, terminal escapes in model_name, an HTTP 500;
- spans: a normal batch of vLLM's llm_request spans every second from 127.0.0.1, over HTTP and gRPC in turn,
  retried on 503 / UNAVAILABLE as OTel's exporters do (so a span is lost only if the agent never took it);
  every few seconds, from a second host address (127.0.0.2, so the intake's per-host fair share works as on a
  real network), one of: 2M empty spans over gRPC, eight HTTP senders of them at once, their JSON form, four
  gRPC Exports that never send their message, 200 connections that never finish their headers; and from
  127.0.0.1 a batch of 50 normal spans with one whose finish_reasons nest 100,000 deep (the 50 count as normal);
- KV events (ZMQ PUB): a normal batch every 0.1 s (blocks stored and removed); every few seconds one of: one
  hash stored 20,000 times, 2,000 removals of it, a sequence jump to 2**64-1, a malformed payload, a 20 MiB
  message;
- readers of /api/v1/frames (bench/_soak_frames.py): every few seconds ten clients at once reading the whole
  history, a reader that stops reading for 20 s, or one that leaves midway.
The agent's CPU is reported by 10 s window against the DaemonSet's request and limit.

The attackers would be other hosts on a real network; here they share the agent's cores. So, once the agent, the
scraper and the do-nothing server are started, every thread of the generator runs at nice GENERATOR_NICE
(`--generator-nice 0`: at the agent's priority, the generator's own CPU then counted in the agent's figures).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import json
import multiprocessing
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _agent import wait_for_route  # noqa: E402  (bench/ is the script's own directory)
from _report import free_port  # noqa: E402
from _soak_frames import FramesClients, cpu_figures, cpu_seconds  # noqa: E402
from otlp_intake import (  # noqa: E402
    EMPTY_SPANS,
    EXPORT,
    JSON_SPANS,
    SENDERS,
    _grpc_export,
    _post,
    _status,
    empty_spans_json,
    empty_spans_protobuf,
    normal_batch,
)

from stagelens.server.api import MAX_FRAMES_LIMIT  # noqa: E402
from stagelens.sources.scrape.heavy_answers import MAX_PAUSE_S  # noqa: E402
from stagelens.sources.scrape.prometheus_text import sample_lines  # noqa: E402
from tests.helpers.second_host import SECOND_HOST, Relay  # noqa: E402  (the tests' second sending host)

DGX = str(ROOT / "tests" / "fixtures" / "nvml" / "dgx_a100.json")
FIXTURES = ROOT / "tests" / "fixtures" / "engines"
DAEMONSET = ROOT / "deploy" / "kubernetes" / "daemonset.yaml"
INTERVAL_S = 1.0
GENERATOR_NICE = 10                         # the hostile generator's threads: behind the agent and the scraper
NORMAL_SPANS = 32                           # a batch of vLLM's exporter at a few requests a second
ENGINE_HOSTILE = ("drip_body", "drip_headers", "huge", "near_cap", "negative_gauge", "blocks_2e29", "duplicate_series",
                  "redirect_elsewhere", "redirect_loop", "escapes_in_model_name", "http_500")
SPAN_HOSTILE = ("grpc_2m_empty", "http_8_senders", "json_4mib", "grpc_stalled_exports", "slow_connections",
                "deep_finish_reasons")
KV_HOSTILE = ("same_hash_20k", "removals_2000", "sequence_jump", "malformed", "message_20mib")


# --- the engine -------------------------------------------------------------------------------------------------
def engine_bodies() -> dict[str, bytes]:
    body = (FIXTURES / "vllm_v1_new_names.txt").read_text()
    running = 'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0'
    generation = 'vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5000.0'
    huge = "# TYPE vllm:junk gauge\n" + "".join(f'vllm:junk{{i="{i}",pad="{"x" * 16}"}} 1\n' for i in range(450_000))
    junk = 19_400 - sample_lines(body)       # issue 39, item 4: 7.8 MB and 19,400 series, under the caps
    near_cap = body + "# TYPE vllm:junk gauge\n" + "".join(f'vllm:junk{{i="{i:05}",pad="{"x" * 378}"}} 1\n'
                                                         for i in range(junk))
    return {
        "normal": body.encode(),
        "huge": huge.encode(),
        "near_cap": near_cap.encode(),
        "negative_gauge": body.replace(running, running.replace("} 2.0", "} -2e9")).encode(),
        "blocks_2e29": body.replace('num_gpu_blocks="1000"', 'num_gpu_blocks="2e29"').encode(),
        "duplicate_series": body.replace(generation, f"{generation}\n{generation}").encode(),
        "escapes_in_model_name": body.replace("meta-llama/Llama-3.1-8B-Instruct",
                                              "llama\x1b]52;c;cHduZWQ=\x07\x1b]0;owned\x07\x1b[2J").encode(),
    }


class HostileEngine(ThreadingHTTPServer):
    """The engine's /metrics: normal half the time, else one of ENGINE_HOSTILE, drawn by a seeded generator;
    normal only once `stop` is set."""

    daemon_threads = True

    def __init__(self, seed: int, stop: threading.Event) -> None:
        self.rng, self.stop, self.sent = random.Random(seed), stop, Counter()
        self.bodies = engine_bodies()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                with server.lock:    # once the soak ends, the engine is calm: the spans taken are read then
                    kind = "normal" if server.stop.is_set() or server.rng.random() < 0.5 else \
                        server.rng.choice(ENGINE_HOSTILE)
                    server.sent[kind] += 1
                with contextlib.suppress(OSError):
                    server.answer(self, kind)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def answer(self, h: BaseHTTPRequestHandler, kind: str) -> None:
        if kind in ("drip_body", "drip_headers"):
            h.wfile.write(b"HTTP/1.1 200 OK\r\n" + (b"Content-Length: 100000\r\n\r\n" if kind == "drip_body" else b""))
            for _ in range(20):               # 10 s: five times the agent's scrape deadline
                h.wfile.write(b"X" if kind == "drip_body" else b"x")
                h.wfile.flush()
                if self.stop.wait(0.5):
                    return
            return
        if kind.startswith("redirect"):
            where = "http://192.0.2.1:9/metrics" if kind == "redirect_elsewhere" else "/metrics"
            h.send_response(302)
            h.send_header("Location", where)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if kind == "http_500":
            h.send_error(500, "engine exploded\x1b[2J")
            return
        data = self.bodies.get(kind, self.bodies["normal"])
        h.send_response(200)
        h.send_header("Content-Type", "text/plain; version=0.0.4")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


# --- the span sender --------------------------------------------------------------------------------------------
NORMAL_ANSWER_TIMEOUT_S = 60.0      # a normal batch waits out the hostile traffic: lost only if never taken
def _post_from(source: str, port: int, body: bytes, content_type: str, timeout: float = 60.0) -> int:
    """`_post` to 127.0.0.1:port/v1/traces from the address `source`."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        connection.request("POST", "/v1/traces", body, {"Content-Type": content_type})
        return connection.getresponse().status
    except OSError:
        return 0
    finally:
        connection.close()


def _export(address: str, body: bytes) -> str:
    """A gRPC Export that waits out the hostile traffic; up to 32 MiB (the 2M empty spans)."""
    return _grpc_export(address, body, NORMAL_ANSWER_TIMEOUT_S, 32 << 20)


RETRYABLE = {503, 429, 502, 504, 0, "UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "ABORTED"}


class SpanSender:
    def __init__(self, http_port: int, grpc_port: int, seed: int, stop: threading.Event) -> None:
        self.traces = f"http://127.0.0.1:{http_port}/v1/traces"
        self.grpc = f"127.0.0.1:{grpc_port}"
        self.http_port, self.rng, self.stop = http_port, random.Random(seed + 1), stop
        self.normal_sent = self.normal_given_up = 0
        self.hostile, self.answers = Counter(), Counter()
        self.pool = concurrent.futures.ThreadPoolExecutor(24)
        self.second_host = Relay(grpc_port, SECOND_HOST)     # the hostile gRPC calls come from 127.0.0.2
        self.empty_pb, self.empty_json = empty_spans_protobuf(EMPTY_SPANS), empty_spans_json(JSON_SPANS)

    def normal(self, n: int, over_grpc: bool, body: bytes | None = None) -> None:
        """One batch, retried with backoff (1, 2, 4 ... 32 s) while the answer says to, as OTel's exporters do."""
        body = body or normal_batch(n)
        delay = 1.0
        for _ in range(7):
            answer = _export(self.grpc, body) if over_grpc else _post(self.traces, body, "application/x-protobuf",
                                                                      NORMAL_ANSWER_TIMEOUT_S)
            self.answers[f"normal_{'grpc' if over_grpc else 'http'}_{answer}"] += 1
            if answer in ("OK", 200):
                return
            if answer not in RETRYABLE:
                break
            time.sleep(delay)         # past the soak's end too: a batch is lost only if its retries run out
            delay *= 2
        self.normal_given_up += n

    def hostile_one(self, kind: str) -> None:
        self.hostile[kind] += 1
        if kind == "grpc_2m_empty":
            self.answers[f"{kind}_{_export(self.second_host.address, self.empty_pb)}"] += 1
        elif kind == "http_8_senders":
            for status in self.pool.map(lambda _: _post_from(SECOND_HOST, self.http_port, self.empty_pb,
                                                             "application/x-protobuf"), range(SENDERS)):
                self.answers[f"{kind}_{status}"] += 1
        elif kind == "json_4mib":
            self.answers[f"{kind}_{_post_from(SECOND_HOST, self.http_port, self.empty_json, 'application/json')}"] += 1
        elif kind == "grpc_stalled_exports":
            self._stalled_exports(4, 15.0)
        elif kind == "slow_connections":
            self._slow_connections(200, 15.0)
        elif kind == "deep_finish_reasons":
            self.normal_sent += 50
            self.pool.submit(self.normal, 50, False, deep_batch(50))

    def _stalled_exports(self, n: int, hold_s: float) -> None:
        import grpc

        release = threading.Event()

        def never():
            release.wait(hold_s)
            return
            yield  # noqa: B901  (a generator that sends nothing)

        channel = grpc.insecure_channel(self.second_host.address)
        calls = [channel.stream_unary(EXPORT).future(never(), timeout=hold_s + 5) for _ in range(n)]

        def close() -> None:
            self.stop.wait(hold_s)
            release.set()
            for call in calls:
                call.cancel()
            channel.close()
        threading.Thread(target=close, daemon=True).start()

    def _slow_connections(self, n: int, hold_s: float) -> None:
        socks = []
        for _ in range(n):
            with contextlib.suppress(OSError):
                s = socket.create_connection(("127.0.0.1", self.http_port), timeout=2,
                                             source_address=(SECOND_HOST, 0))
                s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)

        def close() -> None:
            self.stop.wait(hold_s)
            for s in socks:
                s.close()
        threading.Thread(target=close, daemon=True).start()

    def run(self) -> None:
        second = 0
        while not self.stop.wait(INTERVAL_S):
            self.normal_sent += NORMAL_SPANS
            self.pool.submit(self.normal, NORMAL_SPANS, second % 2 == 1)
            if second % 5 == 4:
                self.pool.submit(self.hostile_one, self.rng.choice(SPAN_HOSTILE))
            second += 1


def deep_batch(good: int) -> bytes:
    """`good` normal llm_request spans and one whose finish_reasons nest 100,000 deep."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.common.v1 import common_pb2

    request = trace_service_pb2.ExportTraceServiceRequest.FromString(normal_batch(good + 1))
    bad = request.resource_spans[0].scope_spans[0].spans[good]
    bad.attributes.add(key="gen_ai.response.finish_reasons", value=common_pb2.AnyValue(string_value="[" * 100_000))
    return request.SerializeToString()


# --- the KV-event publisher -------------------------------------------------------------------------------------
class KvPublisher:
    def __init__(self, seed: int, stop: threading.Event) -> None:
        import zmq

        from stagelens.engine_hooks.engine.vllm_face.kv_events_publisher import BlockRemoved, BlockStored, encode_batch

        self.encode, self.stored, self.removed = encode_batch, BlockStored, BlockRemoved
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.rng, self.stop, self.seq, self.sent = random.Random(seed + 2), stop, 0, Counter()

    def send(self, payload: bytes) -> None:
        self.sock.send_multipart([b"", (self.seq % 2**64).to_bytes(8, "big"), payload])
        self.seq += 1

    def hostile_one(self, kind: str) -> None:
        self.sent[kind] += 1
        if kind == "same_hash_20k":
            self.send(self.encode(time.time(), [self.stored((7,) * 20_000, None, (), 16)]))
        elif kind == "removals_2000":
            self.send(self.encode(time.time(), [self.removed((7,) * 2000)]))
        elif kind == "sequence_jump":
            self.seq = 2**64 - 1
            self.send(self.encode(time.time(), []))
            self.seq = 0
        elif kind == "malformed":
            self.send(b"\xc1\x00")
        elif kind == "message_20mib":
            self.send(b"\x00" * (20 * 2**20))

    def run(self) -> None:
        live: list[int] = []
        tick = 0
        while not self.stop.wait(0.1):
            new = [self.rng.getrandbits(63) for _ in range(4)]
            live += new
            gone, live = (live[:4], live[4:]) if len(live) > 64 else ([], live)
            events = [self.stored(tuple(new), None, (), 16)] + ([self.removed(tuple(gone))] if gone else [])
            self.send(self.encode(time.time(), events))
            self.sent["normal"] += 1
            tick += 1
            if tick % 50 == 0:
                self.hostile_one(self.rng.choice(KV_HOSTILE))

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


# --- measuring --------------------------------------------------------------------------------------------------
def scrape(url: str, floor_url: str, every_s: float, seconds: float, results) -> None:
    """In a process of its own (the generator's threads would delay its clock): /metrics every `every_s`, its
    latency and the age of the agent's latest frame at each answer; between two, the do-nothing server's
    answer time (the floor: what the busy machine costs any HTTP server)."""
    from stagelens.loadtest.http_point import metric_value

    latencies, floor, ages, failures = [], [], [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                text = answer.read().decode()
            latencies.append(time.perf_counter() - t0)
            frame = metric_value(text, "stagelens_frame_timestamp_seconds")
            if frame:
                ages.append(time.time() - frame)
        except OSError:
            failures += 1
        time.sleep(every_s / 2)
        t0 = time.perf_counter()
        with contextlib.suppress(OSError), urllib.request.urlopen(floor_url, timeout=30) as answer:
            answer.read()
            floor.append(time.perf_counter() - t0)
        time.sleep(every_s / 2)
    results.put((latencies, floor, ages, failures))


def do_nothing_server(port: int) -> None:
    """In a process of its own, as the agent is: an HTTP server answering every GET with a short 200."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"ok\n")

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def _wait_answering(url: str, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2):
            return
        time.sleep(0.1)
    raise SystemExit(f"the do-nothing server at {url} did not answer within {deadline_s:g} s")


def _pct(values: list[float], q: float) -> float | None:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] if values else None


def intake(text: str) -> dict[str, float]:
    from _soak_clients import labelled

    return labelled(text, "stagelens_engine_intake_total", "what")


def lower_this_process(nice: int) -> None:
    """Every thread of this process at `nice` (Linux's nice is per thread; threads started later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):   # a thread that ended meanwhile
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)


def run(duration: float, seed: int, history: int | None = None, generator_nice: int | None = None) -> dict:
    generator_nice = GENERATOR_NICE if generator_nice is None else generator_nice
    stop = threading.Event()
    engine = HostileEngine(seed, stop)
    kv = KvPublisher(seed, stop)
    port, http_port, grpc_port = free_port(), free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    log = tempfile.NamedTemporaryFile(prefix="soak-outside-", suffix=".log", delete=False)  # noqa: SIM115
    agent = subprocess.Popen(
        [sys.executable, "-c", "from stagelens.cli import main; main()", "--nvml-snapshot", DGX, "serve",
         "--listen", f"127.0.0.1:{port}", "--engine", "vllm", "--engine-url", engine.url,
         "--otlp-receiver", f"127.0.0.1:{http_port}", "--otlp-receiver-grpc", f"127.0.0.1:{grpc_port}",
         "--kv-events", f"tcp://127.0.0.1:{kv.port}", "--interval", f"{INTERVAL_S:g}",
         *(["--history", str(history)] if history else [])],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)     # bench/probes.py is not the probes package
    spans = SpanSender(http_port, grpc_port, seed, stop)
    frames = FramesClients(port, seed, stop)
    figures: dict = {"soak_s": duration, "seed": seed, "history_frames": history or "agent's default",
                     "generator_nice": generator_nice}
    try:
        wait_for_route(base, "/healthz", agent, deadline_s=90)   # its engine is hostile: /readyz may never say ready
        figures["rss_start_mib"] = round(_status(agent.pid, "VmRSS"), 1)
        ctx = multiprocessing.get_context("spawn")
        floor_port = free_port()
        floor_server = ctx.Process(target=do_nothing_server, args=(floor_port,), daemon=True)
        floor_server.start()
        floor_url = f"http://127.0.0.1:{floor_port}/"
        _wait_answering(floor_url)
        results = ctx.Queue()
        scraper = ctx.Process(target=scrape, args=(base + "/metrics", floor_url, 0.5, duration, results), daemon=True)
        scraper.start()
        lower_this_process(generator_nice)
        workers = [threading.Thread(target=w, daemon=True) for w in (spans.run, kv.run, frames.run)]
        for w in workers:
            w.start()
        rss, cpu, t0 = [], [], time.monotonic()
        while time.monotonic() - t0 < duration and agent.poll() is None:
            rss.append((time.monotonic() - t0, _status(agent.pid, "VmRSS")))
            cpu.append((time.monotonic() - t0, cpu_seconds(agent.pid)))
            time.sleep(2.0)
        stop.set()
        latencies, floor, ages, failures = results.get(timeout=60)
        scraper.join(timeout=5)
        floor_server.terminate()
        spans.pool.shutdown(wait=True, cancel_futures=False)     # the normal batches' retries finish
        figures.update(_rss_figures(rss, _status(agent.pid, "VmHWM") if agent.poll() is None else None))
        figures.update(cpu_figures(cpu))
        figures.update({
            "metrics_scrapes": len(latencies), "metrics_failures": failures,
            "metrics_p50_ms": _ms(_pct(latencies, 0.5)), "metrics_p99_ms": _ms(_pct(latencies, 0.99)),
            "metrics_max_ms": _ms(max(latencies, default=None)), "metrics_p99_target_ms": 10,
            "floor_p50_ms": _ms(_pct(floor, 0.5)), "floor_p99_ms": _ms(_pct(floor, 0.99)),
            "load_average_1_5_15": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "frame_age_max_s": _round(max(ages, default=None)), "frame_age_p99_s": _round(_pct(ages, 0.99)),
            "frame_age_max_intervals": _round(max(ages, default=0) / INTERVAL_S), "frame_age_target_intervals": 3,
        })
        taken = _spans_taken(base)
        figures.update({"normal_spans_sent": spans.normal_sent, "normal_spans_given_up": spans.normal_given_up,
                        "llm_request_spans_taken": taken,
                        "normal_spans_lost": spans.normal_sent - taken if taken is not None else None,
                        "normal_spans_lost_target": 0})
        figures.update({f"engine.{k}": v for k, v in sorted(engine.sent.items())})
        figures.update({f"spans.{k}": v for k, v in sorted(spans.hostile.items())})
        figures.update({f"answers.{k}": v for k, v in sorted(spans.answers.items())})
        figures.update({f"kv.{k}": v for k, v in sorted(kv.sent.items())})
        frames.pool.shutdown(wait=True, cancel_futures=False)
        figures.update({f"frames.{k}": v for k, v in sorted(frames.sent.items())})
        figures.update({f"frames_answers.{k}": v for k, v in sorted(frames.answers.items())})
        figures.update(_history(base))
        figures["agent_alive"] = agent.poll() is None
        t = time.monotonic()
        agent.terminate()
        figures["sigterm_exit_code"] = agent.wait(timeout=60)
        figures["sigterm_exit_s"] = round(time.monotonic() - t, 2)
    finally:
        stop.set()
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=30)
        engine.shutdown()
        kv.close()
        spans.second_host.close()
        log.close()
        text = Path(log.name).read_text(errors="replace")
        os.unlink(log.name)
        if agent.returncode not in (0, None) and "sigterm_exit_code" not in figures:
            print(text[-3000:], file=sys.stderr)
    figures["agent_log_tracebacks"] = text.count("Traceback")
    figures["agent_log_lines"] = len(text.splitlines())
    return figures


def _spans_taken(base: str) -> float | None:
    """llm_request spans the agent read (not those it could not), once a few frames in a row say the same: a
    frame's count is from its tick, so the last batches show a tick or two after they were answered. The agent
    may still be pausing its reads of the engine after a heavy answer
    (agent/sources/scrape/heavy_answers.py): a frame
    holds the engine, and its intake, once the pause is over."""
    end, seen = time.monotonic() + MAX_PAUSE_S + 60, []
    while time.monotonic() < end:
        with contextlib.suppress(OSError), urllib.request.urlopen(base + "/metrics", timeout=10) as answer:
            counts = intake(answer.read().decode())
            if "llm_request_spans" in counts:      # a frame that holds the engine (a hostile scrape's does not)
                seen.append(counts["llm_request_spans"] - counts.get("malformed_spans", 0.0))
                if len(seen) >= 4 and len(set(seen[-4:])) == 1:
                    return seen[-1]
        time.sleep(1.0)
    return seen[-1] if seen else None


def _history(base: str) -> dict:
    """The frames the agent keeps now, and their size as JSON: the history fills for --history intervals (900 s
    by default), so RSS grows by design until it is full."""
    with urllib.request.urlopen(base + f"/api/v1/frames?limit={MAX_FRAMES_LIMIT}", timeout=60) as answer:
        body = answer.read()
    kept = len(json.loads(body))
    return {"frames_kept": kept, "frame_json_kib_mean": round(len(body) / max(1, kept) / 1024, 1)}


def _rss_figures(rss: list[tuple[float, float]], peak: float | None) -> dict:
    if not rss:
        return {}
    """RSS in MiB (/proc's kB / 1024), as the limit is written: the largest sample, the kernel's high-water mark
    (VmHWM, between samples too), and the last sample of each minute."""
    minute = {int(t // 60): mib for t, mib in rss}
    highest, limit = max(peak or 0, max(mib for _, mib in rss)), daemonset_limit_mib()
    return {"rss_max_mib": round(max(mib for _, mib in rss), 1), "rss_peak_vmhwm_mib": _round(peak),
            "rss_limit_mib": limit, "rss_peak_share_of_limit": round(highest / limit, 3),
            "rss_by_minute_mib": " ".join(f"{mib:.0f}" for _, mib in sorted(minute.items()))}


def daemonset_limit_mib() -> int:
    """The DaemonSet's memory limit (resources.limits.memory, in Mi), as the deploy file says it now."""
    limits = re.search(r"limits:\s*\n(?:\s+\w+: .*\n)*?\s+memory: (\d+)Mi", DAEMONSET.read_text())
    if limits is None:
        raise SystemExit(f"{DAEMONSET}: no resources.limits.memory in Mi")
    return int(limits.group(1))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
