"""KV block allocators behind one interface.

`paged`: blocks handed out one at a time from an O(1) free-block queue, as PagedAttention does.
`contiguous`: each request reserves `max_model_len` slots as one extent, first fit, as serving
systems did before PagedAttention; the waste Stage 1 detects.
Both present a block table per request, so attention reads K/V the same way for either.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class AllocatorUsage:
    num_blocks: int
    used_blocks: int          # blocks owned by some request (reserved, for `contiguous`)
    largest_free_run: int     # longest run of consecutive free blocks
    unusable_free_blocks: int = 0   # free, but in no extent large enough for a new request

    @property
    def free_blocks(self) -> int:
        return self.num_blocks - self.used_blocks


class BlockAllocator(ABC):
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._tables: dict[str, list[int]] = {}

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def block_table(self, request_id: str) -> list[int]:
        return self._tables[request_id]

    def owners(self) -> dict[str, list[int]]:
        return self._tables

    @abstractmethod
    def allocate(self, request_id: str, num_tokens: int) -> bool:
        """Make room for `num_tokens` tokens in total; False (and no change) if memory is short."""

    @abstractmethod
    def free(self, request_id: str) -> None:
        """Return every block of the request."""

    @abstractmethod
    def usage(self) -> AllocatorUsage:
        """A full account of the pool (walks the free list: for sampling, not for every step)."""

    @abstractmethod
    def num_free_blocks(self) -> int: ...

    @abstractmethod
    def reserved_blocks(self, request_id: str) -> int:
        """Blocks held for the request, including any reserved beyond its block table."""


class PagedAllocator(BlockAllocator):
    def __init__(self, num_blocks: int, block_size: int) -> None:
        super().__init__(num_blocks, block_size)
        self._free: deque[int] = deque(range(num_blocks))

    def allocate(self, request_id: str, num_tokens: int) -> bool:
        table = self._tables.get(request_id)
        have = len(table) if table else 0
        need = self.blocks_needed(num_tokens) - have
        if need <= 0:
            return True
        if need > len(self._free):
            return False
        new = [self._free.popleft() for _ in range(need)]
        if table is None:
            self._tables[request_id] = new
        else:
            table.extend(new)
        return True

    def free(self, request_id: str) -> None:
        # Freed blocks join the tail so the most recently used stay out of circulation longest.
        self._free.extend(reversed(self._tables.pop(request_id, [])))

    def reserved_blocks(self, request_id: str) -> int:
        return len(self._tables.get(request_id, ()))

    def num_free_blocks(self) -> int:
        return len(self._free)

    def usage(self) -> AllocatorUsage:
        return AllocatorUsage(self.num_blocks, self.num_blocks - len(self._free),
                              _longest_run(self._free))


class ContiguousAllocator(BlockAllocator):
    """First-fit extents of `blocks_per_request` blocks; free extents kept sorted and coalesced."""

    def __init__(self, num_blocks: int, block_size: int, blocks_per_request: int) -> None:
        super().__init__(num_blocks, block_size)
        self.blocks_per_request = min(blocks_per_request, num_blocks)
        # (start, length), sorted by start
        self._extents: list[tuple[int, int]] = [(0, num_blocks)]
        self._reservation: dict[str, int] = {}                      # request -> extent start

    def allocate(self, request_id: str, num_tokens: int) -> bool:
        need = self.blocks_needed(num_tokens)
        if need > self.blocks_per_request:
            return False
        start = self._reservation.get(request_id)
        if start is None:
            start = self._take_first_fit()
            if start is None:
                return False
            self._reservation[request_id] = start
        self._tables[request_id] = list(range(start, start + need))
        return True

    def _take_first_fit(self) -> int | None:
        n = self.blocks_per_request
        for i, (start, length) in enumerate(self._extents):
            if length >= n:
                if length == n:
                    del self._extents[i]
                else:
                    self._extents[i] = (start + n, length - n)
                return start
        return None

    def free(self, request_id: str) -> None:
        self._tables.pop(request_id, None)
        start = self._reservation.pop(request_id, None)
        if start is None:
            return
        ext = self._extents
        i = bisect.bisect_left(ext, (start, 0))
        ext.insert(i, (start, self.blocks_per_request))
        # coalesce with the right, then the left neighbour
        if i + 1 < len(ext) and ext[i][0] + ext[i][1] == ext[i + 1][0]:
            ext[i] = (ext[i][0], ext[i][1] + ext[i + 1][1])
            del ext[i + 1]
        if i > 0 and ext[i - 1][0] + ext[i - 1][1] == ext[i][0]:
            ext[i - 1] = (ext[i - 1][0], ext[i - 1][1] + ext[i][1])
            del ext[i]

    def reserved_blocks(self, request_id: str) -> int:
        return self.blocks_per_request if request_id in self._reservation else 0

    def num_free_blocks(self) -> int:
        return sum(length for _, length in self._extents)

    def usage(self) -> AllocatorUsage:
        largest = max((length for _, length in self._extents), default=0)
        unusable = sum(length % self.blocks_per_request for _, length in self._extents)
        return AllocatorUsage(self.num_blocks, self.num_blocks - self.num_free_blocks(), largest,
                              unusable)


def _longest_run(blocks) -> int:
    ordered = sorted(blocks)
    best = run = 0
    prev = None
    for b in ordered:
        run = run + 1 if prev is not None and b == prev + 1 else 1
        best = max(best, run)
        prev = b
    return best


def make_allocator(kind: str, num_blocks: int, block_size: int, blocks_per_request: int) -> BlockAllocator:
    if kind == "contiguous":
        return ContiguousAllocator(num_blocks, block_size, blocks_per_request)
    return PagedAllocator(num_blocks, block_size)
