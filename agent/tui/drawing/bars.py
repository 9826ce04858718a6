"""A horizontal bar of a value against its cap, coloured by the thresholds it crosses."""

from __future__ import annotations

from rich.text import Text

from stagelens.diagnosis.evaluate import threshold_level
from stagelens.fmt import STATE_COLOR

EIGHTHS = " ▏▎▍▌▋▊▉█"
VBLOCKS = " ▁▂▃▄▅▆▇█"


def level_color(ratio: float | None, warn: float | None, firing: float | None) -> str:
    """The colour of a use of a cap (higher is worse) against its thresholds; grey when unknown."""
    return "grey50" if ratio is None else STATE_COLOR[threshold_level(ratio, warn, firing, "above")]


def bar(ratio: float | None, width: int, warn: float | None = None, firing: float | None = None) -> Text:
    """`▕████▌   ▏` of `ratio` (0..1) in `width` cells, the frame included; `?` cells when unknown.
    """
    inner = max(1, width - 2)
    text = Text("▕", style="grey50")
    if ratio is None:
        text.append("?" * inner, style="grey50")
    else:
        filled = max(0.0, min(1.0, ratio)) * inner
        whole = int(filled)
        part = EIGHTHS[int((filled - whole) * 8)] if whole < inner else ""
        text.append("█" * whole + part.strip(), style=level_color(ratio, warn, firing))
        text.append("·" * (inner - whole - (1 if part.strip() else 0)), style="grey30")
    text.append("▏", style="grey50")
    return text


class Bar:
    """`bar()` as a table cell: drawn at its column's width, up to `max_width`."""

    def __init__(self, ratio: float | None, warn: float | None = None, firing: float | None = None,
                 max_width: int = 40) -> None:
        self.ratio, self.warn, self.firing, self.max_width = ratio, warn, firing, max_width

    def to_text(self, width: int) -> Text:
        return bar(self.ratio, min(self.max_width, width), self.warn, self.firing)


class LinkStrip:
    """One cell per link, its height the link's use against its cap (the busier of tx and rx),
    coloured by the thresholds: twelve NVLinks read at a glance. Too narrow for a cell each: the
    busiest link's Bar."""

    def __init__(self, ratios: list[float | None], warn: float | None = None,
                 firing: float | None = None) -> None:
        self.ratios, self.warn, self.firing = ratios, warn, firing

    def to_text(self, width: int) -> Text:
        known = [r for r in self.ratios if r is not None]
        if width < len(self.ratios) + 2:
            return Bar(max(known) if known else None, self.warn, self.firing).to_text(width)
        text = Text("▕", style="grey50")
        for r in self.ratios:
            if r is None:
                text.append("?", style="grey50")
            else:
                level = max(0.0, min(1.0, r))
                # an idle link still shows its lowest block: there, and idle
                text.append(VBLOCKS[max(1, round(level * 8))],
                            style=level_color(r, self.warn, self.firing))
        text.append("▏", style="grey50")
        return text
