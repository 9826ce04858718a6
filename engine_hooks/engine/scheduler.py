"""Continuous batching under a token budget, in the manner of vLLM V1.

Each step: running requests first (decodes and the next chunk of unfinished prefills), in
admission order, preempting from the tail by recompute when blocks run out; then, if nothing was
preempted, waiting requests in policy order until the budget, `max_num_seqs` or the KV cache
runs out. Every request left waiting gets the reason it waits.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from stagelens.engine_hooks.records.waits import MAX_NUM_SEQS, MODEL_LOADING, NO_FREE_BLOCKS, PREEMPTED, TOKEN_BUDGET

from .allocator import BlockAllocator
from .config import EngineConfig
from .request import Request, Status
from .residency import ModelResidency


@dataclass
class ScheduledBatch:
    # request, tokens to compute now
    entries: list[tuple[Request, int]] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    # their model could not be loaded
    failed: list[Request] = field(default_factory=list)
    waiting_reasons: dict[str, str] = field(default_factory=dict)       # request id -> reason
    token_budget: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.entries)


class Scheduler:
    def __init__(self, config: EngineConfig, allocator: BlockAllocator, residency: ModelResidency) -> None:
        self.config = config
        self.allocator = allocator
        self.residency = residency
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        # the request being scheduled: the one to fail if scheduling raises
        self.current: Request | None = None

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def models_in_use(self) -> set[str]:
        return {r.model for r in self.running}

    def schedule(self) -> ScheduledBatch:
        self.current = None
        batch = ScheduledBatch(token_budget=self.config.max_num_batched_tokens)
        budget = self._schedule_running(batch, batch.token_budget)
        if batch.preempted:
            # Memory is short this step: admitting anyone now would only preempt them again.
            for req in self.waiting:
                batch.waiting_reasons[req.request_id] = PREEMPTED if req.num_preemptions else NO_FREE_BLOCKS
        else:
            self._schedule_waiting(batch, budget)
        self.current = None
        return batch

    def _schedule_running(self, batch: ScheduledBatch, budget: int) -> int:
        for req in list(self.running):
            if req.status is not Status.RUNNING:
                continue    # preempted earlier in this loop
            self.current = req
            if budget == 0:
                batch.waiting_reasons[req.request_id] = TOKEN_BUDGET
                continue
            n = min(self._chunk(req), budget)
            while not self.allocator.allocate(req.request_id, req.num_computed_tokens + n):
                victim = self.running[-1]
                self.preempt(victim)
                batch.preempted.append(victim)
                if victim is req:
                    break
            else:
                batch.entries.append((req, n))
                budget -= n
        return budget

    def _schedule_waiting(self, batch: ScheduledBatch, budget: int) -> None:
        stop_reason = None
        for req in self._in_policy_order():
            rid = req.request_id
            self.current = req
            if stop_reason is None and len(self.running) >= self.config.max_num_seqs:
                stop_reason = MAX_NUM_SEQS
            if stop_reason is not None:
                batch.waiting_reasons[rid] = stop_reason
                continue
            if self.residency.load_errors.get(req.model):
                batch.failed.append(req)
                continue
            if not self.residency.is_resident(req.model):
                self.residency.request_load(req.model)
                batch.waiting_reasons[rid] = MODEL_LOADING
                continue
            n = self._chunk(req)
            if self.config.enable_chunked_prefill:
                n = min(n, budget)
            if n == 0 or n > budget:
                stop_reason = batch.waiting_reasons[rid] = TOKEN_BUDGET
                continue
            if not self.allocator.allocate(rid, req.num_computed_tokens + n):
                stop_reason = batch.waiting_reasons[rid] = NO_FREE_BLOCKS
                continue
            self._admit(req)
            batch.entries.append((req, n))
            budget -= n
        for req in batch.failed:
            self.waiting.remove(req)

    def _chunk(self, req: Request) -> int:
        """Tokens the request would compute now, a long prefill capped when chunking allows it."""
        n = req.num_tokens_to_compute
        cap = self.config.long_prefill_token_threshold
        if self.config.enable_chunked_prefill and cap and n > cap:
            return cap
        return n

    def _in_policy_order(self) -> list[Request]:
        policy = self.config.policy
        if policy == "short-first":
            return sorted(self.waiting, key=lambda r: (r.num_tokens_to_compute, r.arrival_time))
        if policy == "length-bucket":
            # Batch requests of similar length: the bucket (power of two) of the running batch, or
            # of the oldest waiting request, goes first; arrival order within and across buckets.
            anchor = self.running or list(self.waiting)[:1]
            target = sorted(_bucket(r) for r in anchor)[len(anchor) // 2]
            return sorted(self.waiting, key=lambda r: (abs(_bucket(r) - target), r.arrival_time))
        return list(self.waiting)

    def _admit(self, req: Request) -> None:
        self.waiting.remove(req)
        self.running.append(req)
        req.status = Status.RUNNING
        req.mark("resumed" if req.num_preemptions else "scheduled")

    def preempt(self, req: Request) -> None:
        """Preemption by recompute: drop the request's KV and requeue it at the front."""
        self.running.remove(req)
        self.allocator.free(req.request_id)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        req.status = Status.WAITING
        req.mark("preempted", time.monotonic())
        self.waiting.appendleft(req)

    def finish(self, req: Request) -> None:
        self.running.remove(req)
        self.allocator.free(req.request_id)

    def abort(self, req: Request) -> None:
        """Drop a request wherever it is (running or waiting) and return its KV blocks."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.allocator.free(req.request_id)

    def requests(self) -> list[Request]:
        return [*self.running, *self.waiting]


def _bucket(req: Request) -> int:
    return req.num_prompt_tokens.bit_length()
