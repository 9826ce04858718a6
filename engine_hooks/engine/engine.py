"""The serving engine: a step loop (schedule, prepare, forward, sample, update) on its own thread.

    engine = LLMEngine(EngineConfig(model="tiny"))
    engine.start()
    req = engine.submit([1, 2, 3], SamplingParams(max_tokens=8))
    tokens = list(req.stream())
    engine.stop()

`step()` is public so a caller (or a test) can also drive the engine synchronously.

No request can stop the engine: each step runs behind a fault barrier. An exception while
scheduling, preparing, running the forward pass, sampling or updating fails only the requests it
concerns (finish reason `error`, their KV blocks returned), is counted by phase in `step_errors` and
logged once with its traceback, and the loop goes on. Should the loop die anyway, every request
still held fails at once with the reason, `failure` says why, and `submit` refuses: nobody waits on
a dead engine.

Observers (`add_observer`) are the engine's own reporting seam, as vLLM's stat loggers are: after
every step `on_step(engine, stats, batch)`, and as each request ends `on_request_end(engine,
request)`, on the engine thread. Its vLLM-compatible interfaces (engine_hooks/engine/vllm_face) are
observers; the stagelens hooks are not (they patch from outside). An observer that raises is counted
in `observer_errors`, logged once, and never fails a step or a request.
"""

from __future__ import annotations

import itertools
import logging
import math
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from .allocator import make_allocator
from .config import ConfigError, EngineConfig
from .kv_cache import KVCache
from .request import FinishReason, Request, SamplingParams, Status
from .residency import ModelResidency
from .runner import ModelRunner
from .sampler import NON_FINITE_LOGITS
from .scheduler import ScheduledBatch, Scheduler
from .weights import default_model_dir

log = logging.getLogger(__name__)
PHASES = ("schedule", "prepare", "forward", "sample", "update")
FINISH_REASONS = (FinishReason.LENGTH, FinishReason.STOP, *FinishReason.FAILED)


class EngineStopped(RuntimeError):
    """The engine takes no more requests: it is stopping, or its loop died (the message says
    why)."""

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class StepStats:
    """What one step did and where its time went (monotonic seconds)."""
    index: int
    start: float
    end: float = 0.0
    schedule_s: float = 0.0
    prepare_s: float = 0.0
    forward_s: float = 0.0
    sample_s: float = 0.0
    update_s: float = 0.0
    token_budget: int = 0
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    num_prefill_seqs: int = 0
    num_decode_seqs: int = 0
    num_waiting: int = 0
    num_running: int = 0
    num_preempted: int = 0
    kv_slots_reserved: int = 0     # slots in blocks held by running requests
    kv_tokens_cached: int = 0      # of which hold a token
    finished: list[str] = field(default_factory=list)

    @property
    def num_scheduled_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens


@dataclass
class EngineTotals:
    """Running totals since start, cheap enough to keep on every step."""
    steps: int = 0
    busy_s: float = 0.0
    preemptions: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    kv_slots_reserved: int = 0     # summed over steps
    kv_tokens_cached: int = 0      # summed over steps

    @property
    def kv_waste_ratio(self) -> float:
        """Reserved KV slots holding no token, averaged over steps."""
        return 1.0 - self.kv_tokens_cached / self.kv_slots_reserved if self.kv_slots_reserved else 0.0

    def add(self, s: StepStats) -> None:
        self.steps += 1
        self.busy_s += s.end - s.start
        self.preemptions += s.num_preempted
        self.prefill_tokens += s.num_prefill_tokens
        self.decode_tokens += s.num_decode_tokens
        self.kv_slots_reserved += s.kv_slots_reserved
        self.kv_tokens_cached += s.kv_tokens_cached


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.device = torch.device(config.resolved_device())
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"--device: {config.device} asked for, but torch sees no CUDA device")
        self.dtype = _DTYPES[config.resolved_dtype()]
        preset = config.preset
        self.model_names = [f"model-{i}" for i in range(config.models)]
        self.kv_cache = KVCache(preset, config.num_blocks(), config.block_size, self.device,
                                self.dtype)
        self.allocator = make_allocator(config.allocator, config.num_blocks(), config.block_size,
                                        config.blocks_per_request())
        self._wake = threading.Event()
        self.residency = ModelResidency(
            preset, self.model_names, [config.seed + i for i in range(config.models)],
            config.model_dir or default_model_dir(), self.device, self.dtype, config.max_resident_models,
            in_use=lambda: self.scheduler.models_in_use(), on_loaded=lambda _name: self._wake.set())
        self.scheduler = Scheduler(config, self.allocator, self.residency)
        self.runner = ModelRunner(preset, self.kv_cache, self.allocator, self.residency,
                                  config.max_model_len, self.device, self.dtype)
        self.residency.preload(config.num_preload_models)
        self._inbox: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self._aborts: queue.SimpleQueue[tuple[str, str, str | None]] = queue.SimpleQueue()
        self._live: dict[str, Request] = {}       # submitted, not finished (engine thread only)
        self._next_deadline = math.inf
        self._ids = itertools.count()
        self._step_index = itertools.count()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # submit against stop and death: no request slips past both
        self._lock = threading.Lock()
        self._accepting = True
        self.failure: str | None = None           # why the loop died; None while it serves
        # Every key present from the start: readers on other threads copy these while the engine
        # counts.
        self.step_errors: Counter[str] = Counter(dict.fromkeys(PHASES, 0))
        self.finish_reasons: Counter[str] = Counter(dict.fromkeys(FINISH_REASONS, 0))
        self.totals = EngineTotals()
        self._observers: tuple = ()
        # the observers' bound methods, resolved when they are added
        self._on_step: tuple = ()
        self._on_request_end: tuple = ()
        self.observer_errors: Counter[str] = Counter()   # by observer class

    # --- observers (any thread adds or removes; the engine thread calls them) ---------------------
    def add_observer(self, observer) -> None:
        """`observer.on_step(engine, stats, batch)` after each step,
        `observer.on_request_end(engine, request)` as each request ends (either method may be
        absent). Adding one already added changes nothing."""
        with self._lock:
            if not any(o is observer for o in self._observers):
                self._set_observers((*self._observers, observer))

    def remove_observer(self, observer) -> None:
        with self._lock:
            self._set_observers(tuple(o for o in self._observers if o is not observer))

    def _set_observers(self, observers: tuple) -> None:
        self._observers = observers
        self._on_step = tuple(m for m in (getattr(o, "on_step", None) for o in observers) if m is not None)
        self._on_request_end = tuple(m for m in (getattr(o, "on_request_end", None) for o in observers)
                                     if m is not None)

    def _notify(self, methods: tuple, *args) -> None:
        for call in methods:
            try:
                call(self, *args)
            except Exception:
                name = type(call.__self__).__name__
                self.observer_errors[name] += 1
                if self.observer_errors[name] == 1:
                    log.exception("engine observer %s failed in %s (further failures are only counted)", name,
                                  call.__name__)

    # --- the public API (any thread) ------------------------------------------------------------
    def submit(self, prompt_token_ids: list[int], params: SamplingParams | None = None,
               model: str | None = None, request_id: str | None = None,
               timeout_s: float | None = None) -> Request:
        """Queue a request; returns it at once. Read it with `stream()` or `wait()`. With
        `timeout_s` the request fails (finish reason `timeout`) if it has not finished that many
        seconds after arrival. Raises ValueError for a request that cannot run, EngineStopped
        when the engine takes none."""
        model = model or self.model_names[0]
        if model not in self.model_names:
            raise ValueError(f"unknown model {model!r} (served: {', '.join(self.model_names)})")
        vocab = self.config.preset.vocab_size
        if any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab for t in prompt_token_ids):
            raise ValueError(f"prompt token ids must be whole numbers in [0, {vocab})")
        if len(prompt_token_ids) >= self.config.max_model_len:
            raise ValueError(f"prompt of {len(prompt_token_ids)} tokens does not fit "
                             f"--max-model-len {self.config.max_model_len} with room for one "
                             f"output token")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        req = Request(request_id or f"req-{next(self._ids)}", model, prompt_token_ids,
                      params or SamplingParams(), timeout_s=timeout_s)
        with self._lock:
            if self.failure is not None:
                raise EngineStopped(f"the engine is down: {self.failure}")
            if not self._accepting:
                raise EngineStopped("the engine is stopping and takes no new requests")
            self._inbox.put(req)
        self._wake.set()
        return req

    def abort(self, request_id: str, reason: str = FinishReason.ABORT,
              error: str | None = "cancelled by the caller") -> None:
        """Stop a request wherever it is; its KV blocks return to the pool at the next step."""
        self._aborts.put((request_id, reason, error))
        self._wake.set()

    @property
    def serving(self) -> bool:
        """The loop runs and takes requests."""
        return self.failure is None and self._accepting and self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._accepting = True
            self._thread = threading.Thread(target=self._loop, name="stagelens-engine", daemon=True)
            self._thread.start()

    def stop(self, grace_s: float = 0.0) -> None:
        """Take no new requests, give those in flight up to `grace_s` seconds to finish, abort
        the rest."""
        with self._lock:
            self._accepting = False
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.failure is None and self._thread is not None \
                and (self._has_work() or not self._inbox.empty()):
            time.sleep(0.01)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            if self._thread.is_alive():
                log.error("the engine loop did not stop within 60 s; abandoning it")
            else:
                self._end_all(FinishReason.ABORT,
                              "the engine was stopped before the request finished")
            self._thread = None
        self.residency.close()

    def run_until_idle(self, timeout: float = 600.0) -> None:
        """Drive the engine on the calling thread until every submitted request has finished."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._wake.clear()
            self._drain_inbox()
            if not self._has_work():
                return
            if self.step().num_scheduled_tokens == 0:
                self._wake.wait(0.01)   # everyone waits on a model load
        raise TimeoutError(f"requests still unfinished after {timeout} s")

    # --- the step loop (engine thread) ------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._wake.clear()
                self._drain_inbox()
                if self._has_work() and self.step().num_scheduled_tokens:
                    continue
                self._wake.wait(0.05)
        except BaseException as exc:   # past the step barrier: nothing may be left waiting on us
            self._die(exc)

    def _has_work(self) -> bool:
        return self.scheduler.has_work() or not self._aborts.empty()

    def _drain_inbox(self) -> None:
        while True:
            try:
                req = self._inbox.get_nowait()
            except queue.Empty:
                return
            self._live[req.request_id] = req
            if req.deadline is not None:
                self._next_deadline = min(self._next_deadline, req.deadline)
            self.scheduler.add(req)

    def step(self) -> StepStats:
        stats = StepStats(next(self._step_index), time.monotonic(),
                          token_budget=self.config.max_num_batched_tokens)
        self._reap(stats)
        batch = self._schedule_guarded(stats)
        t1 = time.monotonic()
        stats.schedule_s = t1 - stats.start
        for req in batch.failed:
            error = self.residency.load_errors.get(req.model, "its model could not be loaded")
            self._fail(req, FinishReason.ERROR, f"model {req.model} could not be loaded: {error}",
                       stats)
        sampled: dict[str, int] = {}
        for group in self.runner.groups(batch.entries):
            self._run_group(group, sampled, stats)
        t5 = time.monotonic()
        stats.prepare_s = (t5 - t1) - stats.forward_s - stats.sample_s
        try:
            self._update(batch, sampled, stats, t5)
        except Exception as exc:
            self._step_failed("update", [r for r, _ in batch.entries if not r.finished], exc, stats)
        stats.end = time.monotonic()
        stats.update_s = stats.end - t5
        self.totals.add(stats)
        if self._on_step:
            self._notify(self._on_step, stats, batch)
        return stats

    def schedule(self) -> ScheduledBatch:
        """The scheduler's decision for this step (a seam the hooks observe)."""
        return self.scheduler.schedule()

    def _schedule_guarded(self, stats: StepStats) -> ScheduledBatch:
        try:
            return self.schedule()
        except Exception as exc:
            # The request being scheduled is the suspect; with none, every request this step
            # considered.
            culprit = self.scheduler.current
            self._step_failed("schedule", [culprit] if culprit else self.scheduler.requests(), exc,
                              stats)
            return ScheduledBatch(token_budget=self.config.max_num_batched_tokens)

    def _run_group(self, group: list[tuple[Request, int]], sampled: dict[str, int], stats: StepStats) -> None:
        """One model's forward pass and sampling; a failure fails this group's requests only."""
        phase = "prepare"
        try:
            inputs = self.runner.prepare(group)
            phase = "forward"
            t2 = time.monotonic()
            logits = self.runner.forward(inputs)
            self._sync()
            phase = "sample"
            t3 = time.monotonic()
            tokens = self.runner.sample(inputs, logits)
            t4 = time.monotonic()
            pairs = list(zip(inputs.sample_requests, tokens, strict=True))
        except Exception as exc:
            self._step_failed(phase, [r for r, _ in group], exc, stats)
            return
        stats.forward_s += t3 - t2
        stats.sample_s += t4 - t3
        for req, token in pairs:
            if token is None:
                self.step_errors["sample"] += 1
                self._fail(req, FinishReason.ERROR, NON_FINITE_LOGITS, stats)
            else:
                sampled[req.request_id] = token

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _update(self, batch: ScheduledBatch, sampled: dict[str, int], stats: StepStats, now: float) -> None:
        max_len = self.config.max_model_len
        for req, n in batch.entries:
            if req.finished:
                continue   # failed earlier in this step
            if n > 1 or req.num_computed_tokens < req.num_prompt_tokens:
                stats.num_prefill_tokens += n
                stats.num_prefill_seqs += 1
            else:
                stats.num_decode_tokens += n
                stats.num_decode_seqs += 1
            req.num_computed_tokens += n
            token = sampled.get(req.request_id)
            if token is None:
                continue
            req.append_token(token, now)
            if len(req.output_token_ids) >= req.params.max_tokens or req.num_tokens >= max_len:
                self.scheduler.finish(req)
                self._end(req, FinishReason.LENGTH, stats, now)
        stats.num_preempted = len(batch.preempted)
        stats.num_waiting = len(self.scheduler.waiting)
        stats.num_running = len(self.scheduler.running)
        bs = self.config.block_size
        for req in self.scheduler.running:
            stats.kv_slots_reserved += self.allocator.reserved_blocks(req.request_id) * bs
            stats.kv_tokens_cached += req.num_computed_tokens

    # --- ending requests (engine thread) ----------------------------------------------------------
    def _reap(self, stats: StepStats) -> None:
        """Cancelled and overdue requests leave before scheduling, so their blocks serve this
        step."""
        while True:
            try:
                request_id, reason, error = self._aborts.get_nowait()
            except queue.Empty:
                break
            req = self._live.get(request_id)
            if req is not None:
                self._fail(req, reason, error, stats)
        now = time.monotonic()
        if now < self._next_deadline:
            return
        self._next_deadline = math.inf
        for req in self.scheduler.requests():
            if req.deadline is None:
                continue
            if req.deadline <= now:
                self._fail(req, FinishReason.TIMEOUT, f"the request did not finish within its "
                           f"deadline of {req.deadline - req.arrival_time:g} s", stats)
            else:
                self._next_deadline = min(self._next_deadline, req.deadline)

    def _step_failed(self, phase: str, requests: list[Request], exc: Exception, stats: StepStats) -> None:
        self.step_errors[phase] += 1
        # once per phase with the traceback; later ones are counted
        if self.step_errors[phase] == 1:
            log.error("an engine step failed in %s; its %d request(s) fail, the engine goes on "
                      "(further failures in %s are "
                      "only counted)", phase, len(requests), phase, exc_info=exc)
        error = f"the engine failed in {phase}: {type(exc).__name__}: {exc}"
        for req in requests:
            self._fail(req, FinishReason.ERROR, error, stats)

    def _fail(self, req: Request, reason: str, error: str | None, stats: StepStats) -> None:
        try:
            self.scheduler.abort(req)
        finally:
            self._end(req, reason, stats, time.monotonic(), error)

    def _end(self, req: Request, reason: str, stats: StepStats | None, now: float,
             error: str | None = None) -> None:
        if req.finished:
            return
        req.finish(reason, now, error)
        self._live.pop(req.request_id, None)
        self.finish_reasons[reason] += 1
        if stats is not None:
            stats.finished.append(req.request_id)
        if self._on_request_end:
            self._notify(self._on_request_end, req)

    def _end_all(self, reason: str, error: str) -> None:
        """Every request still held (queued, waiting or running) ends now; only once the loop is
        gone."""
        self._drain_inbox()
        now = time.monotonic()
        for req in list(self._live.values()):
            try:
                self.scheduler.abort(req)
            # the scheduler's state may be what broke; the request ends regardless
            except Exception:
                log.debug("could not release %s", req.request_id, exc_info=True)
            self._end(req, reason, None, now, error)

    def _die(self, exc: BaseException) -> None:
        with self._lock:
            self.failure = f"{type(exc).__name__}: {exc}"
        log.critical("the engine loop died; every request it held fails and it takes no more",
                     exc_info=exc)
        self._end_all(FinishReason.ERROR, f"the engine stopped: {self.failure}")

    def __enter__(self) -> LLMEngine:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["EngineStopped", "EngineTotals", "LLMEngine", "EngineConfig", "SamplingParams",
           "Request", "Status", "StepStats"]
