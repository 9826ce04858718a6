"""The serving engine: a step loop (schedule, prepare, forward, sample, update) on its own thread.

    engine = LLMEngine(EngineConfig(model="tiny"))
    engine.start()
    req = engine.submit([1, 2, 3], SamplingParams(max_tokens=8))
    tokens = list(req.stream())
    engine.stop()

`step()` is public so a caller (or a test) can also drive the engine synchronously.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from dataclasses import dataclass, field

import torch

from .allocator import make_allocator
from .config import ConfigError, EngineConfig
from .kv_cache import KVCache
from .request import Request, SamplingParams, Status
from .residency import ModelResidency
from .runner import ModelRunner
from .scheduler import ScheduledBatch, Scheduler
from .weights import default_model_dir

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
        self.kv_cache = KVCache(preset, config.num_blocks(), config.block_size, self.device, self.dtype)
        self.allocator = make_allocator(config.allocator, config.num_blocks(), config.block_size,
                                        config.blocks_per_request())
        self._wake = threading.Event()
        self.residency = ModelResidency(
            preset, self.model_names, [config.seed + i for i in range(config.models)],
            config.model_dir or default_model_dir(), self.device, self.dtype, config.max_resident_models,
            in_use=lambda: self.scheduler.models_in_use(), on_loaded=lambda _name: self._wake.set())
        self.scheduler = Scheduler(config, self.allocator, self.residency)
        self.runner = ModelRunner(preset, self.kv_cache, self.allocator, self.residency, config.max_model_len,
                                  self.device, self.dtype)
        self.residency.preload(config.num_preload_models)
        self._inbox: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self._ids = itertools.count()
        self._step_index = itertools.count()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.totals = EngineTotals()

    # --- the public API (any thread) ------------------------------------------------------------
    def submit(self, prompt_token_ids: list[int], params: SamplingParams | None = None,
               model: str | None = None, request_id: str | None = None) -> Request:
        """Queue a request; returns it at once. Read it with `stream()` or `wait()`."""
        model = model or self.model_names[0]
        if model not in self.model_names:
            raise ValueError(f"unknown model {model!r} (served: {', '.join(self.model_names)})")
        vocab = self.config.preset.vocab_size
        if any(not 0 <= t < vocab for t in prompt_token_ids):
            raise ValueError(f"prompt token ids must lie in [0, {vocab})")
        if len(prompt_token_ids) >= self.config.max_model_len:
            raise ValueError(f"prompt of {len(prompt_token_ids)} tokens does not fit --max-model-len "
                             f"{self.config.max_model_len} with room for one output token")
        req = Request(request_id or f"req-{next(self._ids)}", model, prompt_token_ids, params or SamplingParams())
        self._inbox.put(req)
        self._wake.set()
        return req

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="stagelens-engine", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        self.residency.close()

    def run_until_idle(self, timeout: float = 600.0) -> None:
        """Drive the engine on the calling thread until every submitted request has finished."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._wake.clear()
            self._drain_inbox()
            if not self.scheduler.has_work():
                return
            if self.step().num_scheduled_tokens == 0:
                self._wake.wait(0.01)   # everyone waits on a model load
        raise TimeoutError(f"requests still unfinished after {timeout} s")

    # --- the step loop (engine thread) ------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self._drain_inbox()
            if self.scheduler.has_work() and self.step().num_scheduled_tokens:
                continue
            self._wake.wait(0.05)

    def _drain_inbox(self) -> None:
        while True:
            try:
                self.scheduler.add(self._inbox.get_nowait())
            except queue.Empty:
                return

    def step(self) -> StepStats:
        stats = StepStats(next(self._step_index), time.monotonic(), token_budget=self.config.max_num_batched_tokens)
        batch = self.schedule()
        t1 = time.monotonic()
        stats.schedule_s = t1 - stats.start
        self._fail(batch)
        sampled: dict[str, int] = {}
        for inputs in self.runner.prepare(batch.entries):
            t2 = time.monotonic()
            logits = self.runner.forward(inputs)
            self._sync()
            t3 = time.monotonic()
            tokens = self.runner.sample(inputs, logits)
            t4 = time.monotonic()
            sampled.update(zip((r.request_id for r in inputs.sample_requests), tokens, strict=True))
            stats.forward_s += t3 - t2
            stats.sample_s += t4 - t3
        t5 = time.monotonic()
        stats.prepare_s = (t5 - t1) - stats.forward_s - stats.sample_s
        self._update(batch, sampled, stats, t5)
        stats.end = time.monotonic()
        stats.update_s = stats.end - t5
        self.totals.add(stats)
        return stats

    def schedule(self) -> ScheduledBatch:
        """The scheduler's decision for this step (a seam the hooks observe)."""
        return self.scheduler.schedule()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _fail(self, batch: ScheduledBatch) -> None:
        now = time.monotonic()
        for req in batch.failed:
            req.finish("error", now)

    def _update(self, batch: ScheduledBatch, sampled: dict[str, int], stats: StepStats, now: float) -> None:
        max_len = self.config.max_model_len
        for req, n in batch.entries:
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
                req.finish("length", now)
                stats.finished.append(req.request_id)
        stats.num_preempted = len(batch.preempted)
        stats.num_waiting = len(self.scheduler.waiting)
        stats.num_running = len(self.scheduler.running)
        bs = self.config.block_size
        for req in self.scheduler.running:
            stats.kv_slots_reserved += self.allocator.reserved_blocks(req.request_id) * bs
            stats.kv_tokens_cached += req.num_computed_tokens

    def __enter__(self) -> LLMEngine:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["EngineTotals", "LLMEngine", "EngineConfig", "SamplingParams", "Request", "Status", "StepStats"]
