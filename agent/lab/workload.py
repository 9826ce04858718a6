"""Seeded workloads: open-loop Poisson arrivals or a closed loop at a concurrency, with prompt and
output length distributions, a share of long prompts, and requests spread over several models."""

from __future__ import annotations

import math
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stagelens.engine_hooks.engine.config import MAX_TOKENS, MODELS, SEED, Bound, ConfigError, flag
from stagelens.engine_hooks.engine.request import Request, SamplingParams

if TYPE_CHECKING:
    from stagelens.engine_hooks.engine.engine import LLMEngine


WORKLOAD_BOUNDS = {
    "rate": Bound(0, 1000, "requests/s", integer=False, low_open=True),
    "concurrency": Bound(1, 1024, "requests in flight"),
    # a day: the TUI's endless local run
    "duration": Bound(0, 86400, "s", integer=False, low_open=True),
    "long_prompt_share": Bound(0, 1, integer=False),
    "long_prompt_len": Bound(1, MAX_TOKENS, "tokens"),
    "models": MODELS,
    "seed": SEED,
    "temperature": Bound(0, 10, integer=False),
}
_LENGTH = Bound(1, MAX_TOKENS, "tokens")
_MEDIAN = Bound(1, MAX_TOKENS, "tokens", integer=False)
_SIGMA = Bound(0, 4, integer=False)     # real prompt lengths spread by 0.5-1.5


@dataclass(frozen=True)
class LengthDist:
    """`N`, `uniform:A:B` or `lognormal:MEDIAN:SIGMA`; every length drawn lies in [1,
    MAX_TOKENS]."""
    kind: str
    a: float
    b: float = 0.0

    def __post_init__(self) -> None:
        _check_dist(self.kind, self.a, self.b, "length")

    @classmethod
    def parse(cls, text: str, flag: str = "length") -> LengthDist:
        parts = str(text).split(":")
        try:
            if len(parts) == 1:
                kind, a, b = "fixed", int(parts[0]), 0.0
            elif parts[0] == "uniform" and len(parts) == 3:
                kind, a, b = "uniform", int(parts[1]), int(parts[2])
            elif parts[0] == "lognormal" and len(parts) == 3:
                kind, a, b = "lognormal", float(parts[1]), float(parts[2])
            else:
                raise ValueError
        except ValueError:
            raise ConfigError(f"{flag}: cannot read {str(text)[:40]!r} (use N, uniform:A:B or "
                              f"lognormal:MEDIAN:SIGMA)") from None
        _check_dist(kind, a, b, flag)
        return cls(kind, a, b)

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        # the exponent is capped first: a draw far in the tail would overflow exp() before min()
        # could
        return max(1,
                   round(math.exp(min(rng.gauss(math.log(self.a), self.b), math.log(MAX_TOKENS)))))

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(int(self.a))
        return f"{self.kind}:{self.a:g}:{self.b:g}"


def _check_dist(kind: str, a, b, where: str) -> None:
    if kind == "fixed":
        _LENGTH.check(where, a)
    elif kind == "uniform":
        _LENGTH.check(f"{where} uniform:A", a)
        _LENGTH.check(f"{where} uniform:A:B", b)
        if b < a:
            raise ConfigError(f"{where} uniform:A:B: B ({b}) is below A ({a})")
    elif kind == "lognormal":
        _MEDIAN.check(f"{where} lognormal:MEDIAN", a)
        _SIGMA.check(f"{where} lognormal:MEDIAN:SIGMA", b)
    else:
        raise ConfigError(f"{where}: unknown distribution {kind!r} (use N, uniform:A:B or lognormal:MEDIAN:SIGMA)")


@dataclass
class WorkloadConfig:
    rate: float | None = 2.0          # requests/s, open loop (Poisson); None with `concurrency`
    concurrency: int | None = None    # closed loop: this many requests in flight
    prompt_len: LengthDist = field(default_factory=lambda: LengthDist("lognormal", 160, 0.6))
    output_len: LengthDist = field(default_factory=lambda: LengthDist("uniform", 16, 64))
    long_prompt_share: float = 0.0
    long_prompt_len: int = 1536
    models: int = 1                   # spread requests over model-0 .. model-(N-1)
    duration: float = 30.0            # seconds of arrivals; in-flight requests then finish
    warmup: float = 0.0               # seconds at the start left out of the throughput window
    seed: int = 0
    temperature: float = 0.0

    def __post_init__(self) -> None:
        if self.concurrency is None and self.rate is None:
            raise ConfigError("--rate: give requests per second, or --concurrency for a closed loop")
        for name, bound in WORKLOAD_BOUNDS.items():
            if not (name in ("rate", "concurrency") and getattr(self, name) is None):
                bound.check(flag(name), getattr(self, name))
        for name in ("prompt_len", "output_len"):
            if not isinstance(getattr(self, name), LengthDist):
                raise ConfigError(f"{flag(name)}: expected N, uniform:A:B or lognormal:MEDIAN:SIGMA")
        if not (isinstance(self.warmup, int | float) and 0 <= self.warmup < self.duration):
            raise ConfigError(f"--warmup: must lie in [0, --duration) s, got {self.warmup!r}")


@dataclass(frozen=True)
class PlannedRequest:
    at: float                 # seconds after the start (open loop); ignored by the closed loop
    prompt: list[int]
    max_tokens: int
    model: str


class WorkloadPlan:
    """The workload's requests, drawn lazily from one seeded stream so any run can be replayed."""

    def __init__(self, cfg: WorkloadConfig, vocab_size: int, max_model_len: int) -> None:
        self.cfg, self.vocab_size, self.max_model_len = cfg, vocab_size, max_model_len
        self._rng = random.Random(cfg.seed)
        self._clock = 0.0
        # long prompts come evenly spaced, at an exact share
        self._long_credit = self._rng.random()


    def next(self) -> PlannedRequest:
        cfg, rng = self.cfg, self._rng
        if cfg.concurrency is None:
            self._clock += rng.expovariate(cfg.rate)
        self._long_credit += cfg.long_prompt_share
        long = self._long_credit >= 1.0
        if long:
            self._long_credit -= 1.0
        out = min(cfg.output_len.sample(rng), self.max_model_len - 1)
        prompt_len = cfg.long_prompt_len if long else cfg.prompt_len.sample(rng)
        prompt_len = max(1, min(prompt_len, self.max_model_len - out))
        prompt = [rng.randrange(self.vocab_size) for _ in range(prompt_len)]
        return PlannedRequest(self._clock, prompt, out, f"model-{rng.randrange(cfg.models)}")


@dataclass
class WorkloadRun:
    requests: list[Request]
    started: float
    ended: float
    window_s: float = 0.0            # the measured window: after warm-up, until arrivals stop
    window_tokens: int = 0           # output tokens produced inside it

    @property
    def elapsed(self) -> float:
        return self.ended - self.started


def _tokens(requests: list[Request]) -> int:
    return sum(len(r.output_token_ids) for r in list(requests))


class _Sample(threading.Timer):
    """Takes one reading `delay` seconds from now (at once for no delay)."""

    def __init__(self, delay: float, read) -> None:
        super().__init__(delay, self._take)
        self.result = None
        self._read = read
        self.daemon = True
        if delay > 0:
            self.start()
        else:
            self.result = 0

    def _take(self) -> None:
        self.result = self._read()


def run_workload(engine: LLMEngine, cfg: WorkloadConfig, on_progress=None,
                 stop: threading.Event | None = None, drain_timeout: float = 300.0) -> WorkloadRun:
    """Submit the workload to a started engine for `cfg.duration` seconds, then wait for what is
    in flight."""
    plan = WorkloadPlan(cfg, engine.config.preset.vocab_size, engine.config.max_model_len)
    stop = stop or threading.Event()
    submitted: list[Request] = []
    started = time.monotonic()
    deadline = started + cfg.duration
    warm = _Sample(cfg.warmup, lambda: _tokens(submitted))

    def submit(p: PlannedRequest) -> Request:
        req = engine.submit(p.prompt,
                            SamplingParams(max_tokens=p.max_tokens, temperature=cfg.temperature),
                            model=p.model)
        submitted.append(req)
        return req

    if cfg.concurrency is None:
        while not stop.is_set():
            p = plan.next()
            if started + p.at >= deadline:
                break
            if stop.wait(max(0.0, started + p.at - time.monotonic())):
                break
            submit(p)
            if on_progress:
                on_progress(submitted)
    else:
        in_flight = [submit(plan.next()) for _ in range(cfg.concurrency)]
        while not stop.is_set() and time.monotonic() < deadline:
            for i, req in enumerate(in_flight):
                if req.finished and time.monotonic() < deadline:
                    in_flight[i] = submit(plan.next())
            if on_progress:
                on_progress(submitted)
            stop.wait(0.005)
    stop.wait(max(0.0, deadline - time.monotonic()))
    window_end = time.monotonic()
    window_tokens = _tokens(submitted) - (warm.result if warm.result is not None else 0)
    warm.cancel()
    drain_end = time.monotonic() + drain_timeout
    for req in submitted:
        req.wait(max(0.0, drain_end - time.monotonic()))
    return WorkloadRun(submitted, started, time.monotonic(), window_end - started - cfg.warmup,
                       window_tokens)
