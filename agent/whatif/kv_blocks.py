"""The simulator's paged KV allocator: the bundled engine's (engine_hooks/engine/allocator.py
`PagedAllocator`) counted instead of listed. Which blocks a request holds never changes a
decision (a request gets its blocks whenever enough are free), so counts decide the same; a list
of free block numbers costs a Python int per block, 5.4 GB for `--set kv-cache-memory=1024GiB`,
where these counts cost one number per running request."""

from __future__ import annotations

from stagelens.lab.bundled_engine import make_allocator


class CountedPagedAllocator:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        self._free = num_blocks
        self._held: dict[str, int] = {}     # request -> blocks it holds

    def allocate(self, request_id: str, num_tokens: int) -> bool:
        """Room for `num_tokens` tokens in all; False (and no change) if too few blocks are free."""
        need = -(-num_tokens // self.block_size) - self._held.get(request_id, 0)
        if need <= 0:
            return True
        if need > self._free:
            return False
        self._free -= need
        self._held[request_id] = self._held.get(request_id, 0) + need
        return True

    def free(self, request_id: str) -> None:
        self._free += self._held.pop(request_id, 0)

    def reserved_blocks(self, request_id: str) -> int:
        return self._held.get(request_id, 0)

    def num_free_blocks(self) -> int:
        return self._free


def simulated_allocator(kind: str, num_blocks: int, block_size: int, blocks_per_request: int):
    """The allocator the simulator runs: paged counted; contiguous the engine's own, whose free
    extents and tables grow with the requests running, not with the KV cache's size."""
    if kind == "contiguous":
        return make_allocator(kind, num_blocks, block_size, blocks_per_request)
    return CountedPagedAllocator(num_blocks, block_size)
