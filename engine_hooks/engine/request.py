"""A request's tokens, progress through the KV cache, and lifecycle timestamps (monotonic
seconds)."""

from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass
from enum import Enum

SEED_RANGE = (-2**63, 2**64 - 1)      # what torch.Generator.manual_seed accepts


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason:
    """Why a request ended. `length`/`stop` are successes; the rest carry `Request.error`."""
    LENGTH = "length"      # max_tokens or max_model_len reached
    STOP = "stop"          # a stop sequence matched (decided by the caller, which aborts the rest)
    ABORT = "abort"        # the caller cancelled it (a client went away) or the engine stopped
    TIMEOUT = "timeout"    # its deadline passed
    ERROR = "error"        # it failed: its model could not load, or a step it was in raised
    FAILED = (ABORT, TIMEOUT, ERROR)


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0     # 0: greedy
    seed: int | None = None      # for temperature sampling; None: derived from the request id

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a whole number of at least 1, got {self.max_tokens!r}")
        if not (isinstance(self.temperature, int | float) and math.isfinite(self.temperature)
                and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        lo, hi = SEED_RANGE
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not lo <= self.seed <= hi):
            raise ValueError(f"seed must be a whole number in [{lo}, {hi}], got {self.seed!r}")


_END = object()


class Request:
    """One generation request. Only the engine thread mutates it; readers get the stream or the
    result."""

    def __init__(self, request_id: str, model: str, prompt_token_ids: list[int],
                 params: SamplingParams, arrival_time: float | None = None,
                 timeout_s: float | None = None) -> None:
        if not prompt_token_ids:
            raise ValueError("a request needs at least one prompt token")
        self.request_id = request_id
        self.model = model
        self.prompt_token_ids = list(prompt_token_ids)
        self.output_token_ids: list[int] = []
        self.params = params
        self.status = Status.WAITING
        self.num_computed_tokens = 0     # tokens whose K/V are in the cache
        self.num_preemptions = 0
        self.finish_reason: str | None = None
        self.error: str | None = None    # why it failed, for a finish reason in FinishReason.FAILED
        self.arrival_time = time.monotonic() if arrival_time is None else arrival_time
        self.deadline = None if timeout_s is None else self.arrival_time + timeout_s
        self.events: list[tuple[float, str]] = [(self.arrival_time, "arrival")]
        self._stream: queue.SimpleQueue = queue.SimpleQueue()
        self._done = threading.Event()

    # --- token accounting -------------------------------------------------------------------
    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_tokens_to_compute(self) -> int:
        """Prompt (or recompute after preemption) still to prefill, or 1 for the next decode."""
        return self.num_tokens - self.num_computed_tokens

    def token_ids(self, start: int, end: int) -> list[int]:
        prompt, n = self.prompt_token_ids, len(self.prompt_token_ids)
        if end <= n:
            return prompt[start:end]
        # a decode reads one output token: slice, don't copy the whole sequence every step
        outputs = self.output_token_ids[max(start - n, 0):end - n]
        return prompt[start:] + outputs if start < n else outputs

    # --- lifecycle ----------------------------------------------------------------------------
    def mark(self, event: str, now: float | None = None) -> None:
        self.events.append((time.monotonic() if now is None else now, event))

    def first_event_time(self, name: str) -> float | None:
        return next((t for t, e in self.events if e == name), None)

    def append_token(self, token_id: int, now: float) -> None:
        if not self.output_token_ids:
            self.mark("first_token", now)
        self.output_token_ids.append(token_id)
        self._stream.put(token_id)

    def finish(self, reason: str, now: float, error: str | None = None) -> None:
        if self._done.is_set():
            return
        self.status = Status.FINISHED
        self.finish_reason = reason
        self.error = error
        self.mark("finished", now)
        self._stream.put(_END)
        self._done.set()

    # --- readers (any thread) -------------------------------------------------------------------
    def stream(self, timeout: float | None = None):
        """Yields token ids as the engine produces them, until the request finishes."""
        while (item := self._stream.get(timeout=timeout)) is not _END:
            yield item

    def take_available(self) -> tuple[list[int], bool]:
        """Tokens produced since the last read, without waiting, and whether the request has
        finished. For event loops, which must not block a thread per request."""
        tokens: list[int] = []
        while True:
            try:
                item = self._stream.get_nowait()
            except queue.Empty:
                return tokens, False
            if item is _END:
                return tokens, True
            tokens.append(item)

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def __repr__(self) -> str:
        return (f"Request({self.request_id}, {self.model}, prompt={self.num_prompt_tokens}, "
                f"out={len(self.output_token_ids)}, computed={self.num_computed_tokens}, "
                f"{self.status.value})")
