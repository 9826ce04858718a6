"""Stop sequences over streamed text: text is released only once no stop sequence can begin in
it, so a stream never shows the start of a stop that the next token completes."""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: list[str]) -> None:
        self.stops = stops
        # a stop may begin this close to the end
        self._hold = max((len(s) for s in stops), default=1) - 1
        self._text = ""
        self._released = 0
        self.matched = False

    def feed(self, piece: str) -> str:
        """Add generated text; returns the part now safe to show. After a match, `matched` is set
        and the text ends where the stop sequence begins."""
        self._text += piece
        hits = [i for s in self.stops if (i := self._text.find(s, self._released)) >= 0]
        if hits:
            self.matched = True
            self._text = self._text[:min(hits)]
            return self._release(len(self._text))
        return self._release(max(self._released, len(self._text) - self._hold))

    def flush(self) -> str:
        """The text held back, once generation has ended without a match."""
        return self._release(len(self._text))

    @property
    def text(self) -> str:
        return self._text

    def _release(self, upto: int) -> str:
        out = self._text[self._released:upto]
        self._released = upto
        return out
