"""Allocator invariants: no block owned twice, exact accounting, everything freed at the end."""

from hypothesis import given, settings
from hypothesis import strategies as st

from stagelens.engine_hooks.engine.allocator import ContiguousAllocator, PagedAllocator

BLOCK = 16
ops = st.lists(st.tuples(st.sampled_from(["grow", "free"]), st.integers(0, 9), st.integers(1, 200)),
               max_size=120)


def _check_invariants(alloc, lengths: dict[str, int]):
    owned = [b for table in alloc.owners().values() for b in table]
    assert len(owned) == len(set(owned)), "a block is owned twice"
    assert all(0 <= b < alloc.num_blocks for b in owned)
    for rid, n in lengths.items():
        assert len(alloc.block_table(rid)) == -(-n // BLOCK)
    reserved = sum(alloc.reserved_blocks(rid) for rid in lengths)
    assert alloc.usage().used_blocks == reserved
    assert alloc.usage().free_blocks == alloc.num_blocks - reserved


def _drive(alloc, operations):
    lengths: dict[str, int] = {}
    for op, who, amount in operations:
        rid = f"r{who}"
        if op == "grow":
            target = lengths.get(rid, 0) + amount
            before = alloc.usage()
            if alloc.allocate(rid, target):
                lengths[rid] = target
            else:
                assert alloc.usage() == before, "a failed allocation changed state"
        else:
            alloc.free(rid)
            lengths.pop(rid, None)
        _check_invariants(alloc, lengths)
    for rid in list(lengths):
        alloc.free(rid)
    assert alloc.usage().used_blocks == 0
    assert alloc.owners() == {}
    assert alloc.usage().largest_free_run == alloc.num_blocks


@settings(max_examples=150, deadline=None)
@given(ops)
def test_paged_allocator_invariants(operations):
    _drive(PagedAllocator(num_blocks=64, block_size=BLOCK), operations)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_contiguous_allocator_invariants(operations):
    alloc = ContiguousAllocator(num_blocks=64, block_size=BLOCK, blocks_per_request=16)
    _drive(alloc, operations)


def test_paged_allocation_is_by_block():
    alloc = PagedAllocator(num_blocks=8, block_size=16)
    assert alloc.allocate("a", 17)          # 17 tokens: 2 blocks, 32 slots
    assert len(alloc.block_table("a")) == 2
    assert not alloc.allocate("b", 16 * 7)  # 7 blocks do not fit in the 6 left
    assert alloc.allocate("b", 16 * 6)
    assert alloc.usage().free_blocks == 0


def test_contiguous_reserves_whole_extent_first_fit():
    alloc = ContiguousAllocator(num_blocks=10, block_size=16, blocks_per_request=4)
    assert alloc.allocate("a", 1) and alloc.allocate("b", 1)
    assert alloc.block_table("a") == [0] and alloc.block_table("b") == [4]
    assert alloc.usage().used_blocks == 8
    assert not alloc.allocate("c", 1)       # 2 blocks free, but no extent of 4
    assert alloc.usage().largest_free_run == 2
    alloc.free("a")
    assert alloc.allocate("c", 40) and alloc.block_table("c") == [0, 1, 2]
    assert not alloc.allocate("c", 16 * 4 + 1)   # beyond its reservation
