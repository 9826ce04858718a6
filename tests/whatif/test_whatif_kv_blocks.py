"""The simulator's KV allocator counts blocks instead of listing them: it decides as the engine's paged allocator
does, and what it holds grows with the requests running, not with the KV cache (`--set kv-cache-memory=1024GiB`
took 5.4 GB when each block was a Python int)."""

import random

from stagelens.lab.bundled_engine import make_allocator, parse_bytes
from stagelens.whatif.kv_blocks import CountedPagedAllocator
from stagelens.whatif.settings import Settings
from stagelens.whatif.simulator import SimRequest, Simulator

SETTINGS = Settings(block_size=16, max_num_seqs=8, max_num_batched_tokens=512, enable_chunked_prefill=True,
                    long_prefill_token_threshold=0, policy="fcfs", allocator="paged", max_model_len=1024,
                    kv_cache_memory=16 * 2**20, kv_bytes_per_token=4096, models=1, num_preload_models=1,
                    max_resident_models=None)


def test_counted_blocks_decide_as_the_engines_paged_allocator():
    rng = random.Random(3)
    engine, counted = make_allocator("paged", 100, 16, 64), CountedPagedAllocator(100, 16)
    held: dict[str, int] = {}
    for i in range(5000):
        rid = f"r{rng.randrange(12)}"
        if rid in held and rng.random() < 0.3:
            engine.free(rid)
            counted.free(rid)
            del held[rid]
            continue
        tokens = held.get(rid, 0) + rng.randint(1, 200)
        ok = engine.allocate(rid, tokens)
        assert counted.allocate(rid, tokens) == ok, i
        if ok:
            held[rid] = tokens
        assert counted.reserved_blocks(rid) == engine.reserved_blocks(rid)
        assert counted.num_free_blocks() == engine.num_free_blocks()


def held_items(allocator) -> int:
    """The items the allocator's own containers hold."""
    return sum(len(v) for v in vars(allocator).values() if hasattr(v, "__len__") and not isinstance(v, str))


def run(settings: Settings, count: int = 200):
    rng = random.Random(1)
    sim = Simulator(settings, lambda *_: (0.01, False), lambda *_: 1.0)
    result = sim.run([SimRequest(f"r{i}", "model-0", i * 0.01, rng.randint(10, 300), rng.randint(1, 30))
                      for i in range(count)])
    return sim, result


def test_the_allocator_holds_what_the_requests_running_hold_not_the_kv_cache():
    for kind in ("paged", "contiguous"):
        small = SETTINGS.changed({"allocator": kind})
        large = small.changed({"kv_cache_memory": parse_bytes("1GiB")})      # 16,384 blocks
        assert large.num_blocks == 64 * small.num_blocks
        (sim_small, _), (sim_large, result) = run(small), run(large)
        assert all(r.finished is not None for r in result.requests)
        assert held_items(sim_large.alloc) == held_items(sim_small.alloc) <= 2 * small.max_num_seqs + 2, kind


def test_a_terabyte_of_kv_cache_simulates():
    settings = SETTINGS.changed({"kv_cache_memory": parse_bytes("1024GiB")})
    assert settings.num_blocks == 2**24
    sim, result = run(settings)
    assert all(r.finished is not None for r in result.requests)
    assert result.log.kv_used_share_seconds < 1e-3     # a few hundred blocks used of 16 million
    assert held_items(sim.alloc) <= 2
