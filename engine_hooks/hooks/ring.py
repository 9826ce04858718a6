"""A bounded ring buffer that counts what it had to drop."""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Ring(Generic[T]):
    def __init__(self, capacity: int) -> None:
        self._items: deque[T] = deque(maxlen=capacity)
        self.dropped = 0
        self.total = 0

    def append(self, item: T) -> None:
        if len(self._items) == self._items.maxlen:
            self.dropped += 1
        self._items.append(item)
        self.total += 1

    def items(self) -> list[T]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)
