"""The simulator's waiting queue (agent/whatif/waiting_queue.py) keeps the scheduler's policy order without
sorting at every step, and the simulations it runs are the ones a straightforward sort of the whole queue at
every step runs (what the engine's scheduler does): the same admissions, preemptions, loads and times, request
by request, under every policy, on seeded workloads that queue, preempt, tie and wait on model loads."""

import random
from collections import deque

import pytest

from stagelens.engine_hooks.engine.config import POLICIES
from stagelens.whatif.settings import Settings
from stagelens.whatif.simulator import SimRequest, Simulator


class SortedEveryStep:
    """The engine's own order (engine_hooks/engine/scheduler.py `_in_policy_order`): the deque sorted again."""

    def __init__(self, policy: str) -> None:
        self.policy, self.items = policy, deque()

    def __len__(self) -> int:
        return len(self.items)

    def append(self, req) -> None:
        self.items.append(req)

    def appendleft(self, req) -> None:
        self.items.appendleft(req)

    def take(self, req) -> None:
        self.items.remove(req)

    def in_order(self, running):
        if self.policy == "short-first":
            return sorted(self.items, key=lambda r: (r.to_compute, r.arrival))
        if self.policy == "length-bucket":
            anchor = running or list(self.items)[:1]
            target = sorted(r.bucket for r in anchor)[len(anchor) // 2]
            return sorted(self.items, key=lambda r: (abs(r.bucket - target), r.arrival))
        return list(self.items)

    def waiting_not_in(self, resident) -> int:
        return sum(1 for r in self.items if r.model not in resident)


def settings(policy: str, chunked: bool) -> Settings:
    # 40 blocks of 16 tokens for up to 6 requests of up to 512: preemption; 3 models, 2 resident: loads
    return Settings(block_size=16, max_num_seqs=6, max_num_batched_tokens=256, enable_chunked_prefill=chunked,
                    long_prefill_token_threshold=64 if chunked else 0, policy=policy, allocator="paged",
                    max_model_len=512, kv_cache_memory=40 * 16 * 1024, kv_bytes_per_token=1024, models=3,
                    num_preload_models=1, max_resident_models=2)


def workload(seed: int, count: int = 400) -> list[tuple]:
    """Arrivals on a 10 ms grid (ties), prompts from a few lengths (ties on tokens to compute), 3 models."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(count):
        t += round(rng.expovariate(40.0), 2)
        out.append((f"r{i}", f"model-{rng.choice([0, 0, 0, 1, 2])}", t,
                    rng.choice([5, 17, 17, 40, 90, 200, 200]), rng.randint(1, 60)))
    return out


def simulate(policy: str, chunked: bool, requests, queue=None):
    def cost(prefill, _pairs, decoding, cached, _loading, forwards, _since):
        return 0.004 + prefill * 2e-5 + decoding * 3e-4 + cached * 1e-7 + (forwards - 1) * 0.002, False

    sim = Simulator(settings(policy, chunked), cost, lambda model, nth: 0.3 + 0.1 * nth)
    if queue is not None:
        sim.waiting = queue(policy)
    sim.trace = []
    run = sim.run([SimRequest(*r) for r in requests])
    return ([(r.rid, r.scheduled, r.first_token, r.finished, r.preemptions) for r in run.requests], sim.trace,
            run.loads, run.log)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_queue_runs_the_simulation_a_sort_at_every_step_runs(policy, chunked, seed):
    requests = workload(seed)
    kept = simulate(policy, chunked, requests)
    sorted_each_step = simulate(policy, chunked, requests, SortedEveryStep)
    assert kept[0] == sorted_each_step[0]
    assert kept[1] == sorted_each_step[1]           # step by step: entries, preemptions, KV
    assert kept[2:] == sorted_each_step[2:]         # the loads and the summed log
    assert any(r[4] for r in kept[0])               # the workload preempts ...
    assert kept[3].waiting_on_model_s > 0          # ... and requests wait on model loads


def test_thirty_thousand_overloaded_requests_under_short_first_all_finish():
    """Arriving ten times as fast as they are served, all queue; each step admits a few of them."""
    rng = random.Random(7)
    requests = [SimRequest(f"r{i}", "model-0", i / 2000, rng.choice([20, 60, 150]), rng.randint(1, 4))
                for i in range(30_000)]
    sim = Simulator(settings("short-first", True), lambda *_: (0.005, False), lambda *_: 1.0)
    run = sim.run(requests)
    assert all(r.finished is not None for r in run.requests)
    assert max(r.scheduled - r.arrival for r in run.requests) > 10     # they queued
