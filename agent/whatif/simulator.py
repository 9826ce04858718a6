"""The bundled engine simulated event by event, without torch: its scheduler's decisions
(engine_hooks/engine/scheduler.py) step by step on its KV allocators
(engine_hooks/engine/allocator.py: the contiguous one as it is, the paged one counted,
agent/whatif/kv_blocks.py), model residency and its loader thread, with each step's time from the
fitted step cost (agent/whatif/fit.py). The waiting requests are kept in policy order
(agent/whatif/waiting_queue.py).

What is mirrored, and where: `_schedule_running` and `_schedule_waiting` follow `Scheduler` line by
line (running first in admission order, preemption of the newest by recompute when blocks run out,
no admission in a step that preempted, waiting in policy order until `max_num_seqs`, the token
budget or the KV cache stops it, requests whose model is cold skipped while its load is asked for);
`_update` follows `LLMEngine._update` (a token when the prefill completes, then one a step, the
request done at its output length); `Residency` follows `ModelResidency` (one loader thread, loads
in the order asked, least recently used model not in use evicted on install). The engine's loop: a
step starts as soon as the last ends while there is work; when nothing could be scheduled it waits
for an arrival or a load.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from stagelens.whatif.kv_blocks import simulated_allocator
from stagelens.whatif.settings import Settings
from stagelens.whatif.waiting_queue import WaitingQueue

WAITING, RUNNING, FINISHED = 0, 1, 2


class SimRequest:
    __slots__ = ("rid", "model", "arrival", "prompt", "max_tokens", "computed", "outputs", "status",
                 "preemptions", "seen", "scheduled", "first_token", "finished", "bucket", "room",
                 "seq")

    def __init__(self, rid: str, model: str, arrival: float, prompt: int, max_tokens: int) -> None:
        self.rid, self.model, self.arrival = rid, model, arrival
        self.prompt, self.max_tokens = prompt, max_tokens
        self.computed = self.outputs = self.preemptions = 0
        self.status = WAITING
        self.seen: float | None = None        # the first step that considered it
        self.scheduled: float | None = None
        self.first_token: float | None = None
        self.finished: float | None = None
        self.bucket = prompt.bit_length()
        # tokens its KV blocks hold: below that, allocating is a no-op to skip
        self.room = 0
        # its place in the waiting queue (agent/whatif/waiting_queue.py)
        self.seq: int | None = None

    @property
    def num_tokens(self) -> int:
        return self.prompt + self.outputs

    @property
    def to_compute(self) -> int:
        return self.prompt + self.outputs - self.computed


@dataclass
class StepLog:
    """What the simulated steps did, summed: enough for the figures and the fit's range check."""
    steps: int = 0
    busy_s: float = 0.0
    # the share of KV blocks in use, times the step's seconds
    kv_used_share_seconds: float = 0.0
    kv_reserved_slots: int = 0
    kv_tokens_cached: int = 0
    # the unfilled rest of each running sequence's last block: the block size's floor
    kv_floor_slots: int = 0
    waiting_on_model_s: float = 0.0     # request-seconds spent waiting on a model load
    max_features: dict[str, float] = field(default_factory=dict)
    # steps whose batch lay outside the range the step cost was fitted on
    steps_outside: int = 0


@dataclass
class Simulation:
    requests: list[SimRequest]
    log: StepLog
    loads: list[tuple[str, float, float]]     # model, start, end
    end: float


class Residency:
    """`ModelResidency` without weights: which models are resident, and when the loader finishes
    each; a model's load number n (from 0) takes `load_seconds(model, n)`."""

    def __init__(self, settings: Settings, load_seconds) -> None:
        self.capacity = settings.max_resident_models or settings.models
        preloaded = settings.model_names[:settings.num_preload_models]
        # least recent first
        self.resident: OrderedDict[str, None] = OrderedDict((n, None) for n in preloaded)
        self.loading: dict[str, float] = {}     # model -> when its load ends
        self.loads: list[tuple[str, float, float]] = []
        self._loader_free_at = 0.0
        self._load_seconds = load_seconds
        self._loads_of: dict[str, int] = {}     # model -> how many times loaded so far

    def request_load(self, model: str, now: float) -> None:
        if model in self.resident or model in self.loading:
            return
        # one loader thread: loads queue behind each other
        start = max(now, self._loader_free_at)
        nth = self._loads_of[model] = self._loads_of.get(model, -1) + 1
        end = self._loader_free_at = start + self._load_seconds(model, nth)
        self.loading[model] = end
        self.loads.append((model, start, end))

    def install_done(self, now: float, in_use: set[str]) -> None:
        for model, end in sorted(self.loading.items(), key=lambda kv: kv[1]):
            if end > now:
                continue
            del self.loading[model]
            while len(self.resident) >= self.capacity:
                victim = next((n for n in self.resident if n not in in_use), None)
                if victim is None:
                    break       # every resident model serves: over capacity rather than stall
                del self.resident[victim]
            self.resident[model] = None

    def next_load_end(self) -> float | None:
        return min(self.loading.values(), default=None)

    def used(self, model: str) -> None:
        self.resident.move_to_end(model)


class Simulator:
    def __init__(self, settings: Settings, cost, load_seconds) -> None:
        self.s = settings
        # StepCost.seconds: a batch's figures -> (seconds, outside the fitted range)
        self.cost = cost
        self.alloc = simulated_allocator(settings.allocator, settings.num_blocks,
                                         settings.block_size, settings.blocks_per_request)
        self.residency = Residency(settings, load_seconds)
        self.waiting = WaitingQueue(settings.policy)
        self.running: list[SimRequest] = []
        self.log = StepLog()
        # decisions of each step, for the tests that hold the simulator to the real engine
        self.trace: list[dict] | None = None

    # --- the scheduler (engine_hooks/engine/scheduler.py) -----------------------------------------
    def schedule(self, now: float) -> tuple[list[tuple[SimRequest, int]], list[SimRequest]]:
        entries: list[tuple[SimRequest, int]] = []
        preempted: list[SimRequest] = []
        budget = self._schedule_running(entries, preempted, self.s.max_num_batched_tokens)
        if not preempted:
            self._schedule_waiting(entries, budget, now)
        return entries, preempted

    def _schedule_running(self, entries, preempted, budget: int) -> int:
        cap = self.s.long_prefill_token_threshold if self.s.enable_chunked_prefill else 0
        for req in list(self.running):
            if req.status != RUNNING or budget == 0:
                continue
            # _chunk, inlined: this runs for every request
            n = req.prompt + req.outputs - req.computed
            if cap and n > cap:
                n = cap
            if n > budget:
                n = budget
            tokens = req.computed + n
            while tokens > req.room and not self._allocate(req, tokens):
                victim = self.running[-1]
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            else:
                entries.append((req, n))
                budget -= n
        return budget

    def _schedule_waiting(self, entries, budget: int, now: float) -> None:
        s = self.s
        if not self.waiting:
            return      # most steps of a load the engine keeps up with: no pass to set up
        for req in self.waiting.in_order(self.running):
            if len(self.running) >= s.max_num_seqs:
                return
            if req.model not in self.residency.resident:
                self.residency.request_load(req.model, now)
                continue
            n = self._chunk(req)
            if s.enable_chunked_prefill:
                n = min(n, budget)
            if n == 0 or n > budget:
                return
            if not self._allocate(req, req.computed + n):
                return
            self.waiting.take(req)
            self.running.append(req)
            req.status = RUNNING
            if req.scheduled is None:
                req.scheduled = now
            entries.append((req, n))
            budget -= n

    def _allocate(self, req: SimRequest, tokens: int) -> bool:
        if tokens <= req.room:
            return True
        if not self.alloc.allocate(req.rid, tokens):
            return False
        req.room = self.alloc.reserved_blocks(req.rid) * self.s.block_size
        return True

    def _free(self, req: SimRequest) -> None:
        self.alloc.free(req.rid)
        req.room = 0

    def _chunk(self, req: SimRequest) -> int:
        n = req.to_compute
        cap = self.s.long_prefill_token_threshold
        if self.s.enable_chunked_prefill and cap and n > cap:
            return cap
        return n

    def _preempt(self, req: SimRequest) -> None:
        self.running.remove(req)
        self._free(req)
        req.computed = 0
        req.preemptions += 1
        req.status = WAITING
        self.waiting.appendleft(req)

    # --- one step's update (LLMEngine._update) ----------------------------------------------------
    def _update(self, entries) -> tuple[list[SimRequest], list[SimRequest]]:
        """(the requests given their first token, those finished): their times are the step's
        end, known once the step is priced on what the engine counts after its update."""
        max_len = self.s.max_model_len
        first, finished = [], []
        for req, n in entries:
            req.computed += n
            # the prompt is complete: a token is sampled
            if req.computed == req.prompt + req.outputs:
                if req.outputs == 0:
                    first.append(req)
                req.outputs += 1
                if req.outputs >= req.max_tokens or req.prompt + req.outputs >= max_len:
                    self.running.remove(req)
                    self._free(req)
                    req.status = FINISHED
                    finished.append(req)
        return first, finished

    # --- the engine loop --------------------------------------------------------------------------
    def run(self, requests: list[SimRequest]) -> Simulation:
        arrivals = deque(sorted(requests, key=lambda r: r.arrival))
        now = arrivals[0].arrival if arrivals else 0.0
        residency, log = self.residency, self.log
        bs = self.s.block_size
        num_blocks = self.alloc.num_blocks
        last_prefill_end = float("-inf")
        while arrivals or self.waiting or self.running:
            while arrivals and arrivals[0].arrival <= now:
                req = arrivals.popleft()
                req.seen = now
                self.waiting.append(req)
            residency.install_done(now, {r.model for r in self.running})
            if not (self.waiting or self.running):
                now = arrivals[0].arrival
                continue
            entries, preempted = self.schedule(now)
            if not entries:
                # nothing to run: everyone waits on a model load (or a request that cannot fit)
                nexts = [t for t in (arrivals[0].arrival if arrivals else None,
                                     residency.next_load_end())
                         if t is not None and t > now]
                if not nexts:
                    break
                log.waiting_on_model_s += (min(nexts) - now) * self._waiting_on_model()
                now = min(nexts)
                continue
            models: list[str] = []
            prefill_tokens = prefill_pairs = decode_seqs = 0
            for req, n in entries:
                if req.model not in models:
                    models.append(req.model)
                if n > 1 or req.computed < req.prompt:
                    prefill_tokens += n
                    prefill_pairs += n * (req.computed + n)
                else:
                    decode_seqs += 1
            for m in models:
                residency.used(m)
            first, finished = self._update(entries)
            # the KV tokens the requests still running hold after the step (what the recorder logs,
            # and what the attention reads: each sequence's own blocks, whatever its allocator
            # reserved), and the slots their blocks reserve (every block held is a running
            # request's)
            cached = sum(r.computed for r in self.running)
            # the block size's floor, which only the diagnosis from outside leaves out
            # (agent/whatif/predict.py)
            floor = sum(-r.computed % bs for r in self.running) if self.s.read_from_outside else 0
            used = num_blocks - self.alloc.num_free_blocks()
            reserved = used * bs
            # one forward pass per model in the batch (ModelRunner.groups)
            seconds, outside = self.cost(prefill_tokens, prefill_pairs, decode_seqs, cached,
                                         bool(residency.loading), len(models),
                                         now - last_prefill_end)
            if self.trace is not None:
                self.trace.append({"entries": [(r.rid, n) for r, n in entries],
                                   "preempted": [r.rid for r in preempted], "kv_slots": reserved,
                                   "kv_tokens": cached})
            now += seconds
            if prefill_tokens:
                last_prefill_end = now
            for req in first:
                req.first_token = now
            for req in finished:
                req.finished = now
            log.steps += 1
            log.busy_s += seconds
            log.steps_outside += outside
            log.kv_used_share_seconds += seconds * used / num_blocks if num_blocks else 0.0
            log.kv_reserved_slots += used * bs
            log.kv_tokens_cached += cached
            log.kv_floor_slots += floor
            if residency.loading or len(residency.resident) < self.s.models:
                log.waiting_on_model_s += seconds * self._waiting_on_model()
        return Simulation(requests, log, residency.loads, now)

    def _waiting_on_model(self) -> int:
        return self.waiting.waiting_not_in(self.residency.resident)
