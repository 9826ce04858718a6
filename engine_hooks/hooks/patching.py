"""Wrapping an object's methods from outside, and putting them back exactly.

The wrapper is stored as an instance attribute that shadows the class method; `restore` deletes it
(or puts back a previous instance attribute), so an uninstrumented object is the object it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MISSING = object()


class Patcher:
    def __init__(self) -> None:
        self._undo: list[tuple[object, str, Any]] = []

    def wrap(self, obj: object, name: str, make_wrapper: Callable[[Callable], Callable]) -> None:
        """Replace `obj.name` by `make_wrapper(original)`."""
        previous = obj.__dict__.get(name, _MISSING) if hasattr(obj, "__dict__") else _MISSING
        original = getattr(obj, name)
        wrapper = make_wrapper(original)
        wrapper.__wrapped__ = original
        setattr(obj, name, wrapper)
        self._undo.append((obj, name, previous))

    def restore(self) -> None:
        while self._undo:
            obj, name, previous = self._undo.pop()
            if previous is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, previous)

    def __len__(self) -> int:
        return len(self._undo)
