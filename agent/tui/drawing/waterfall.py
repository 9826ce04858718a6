"""Requests drawn as waterfalls: queue, prefill, decode and preempted time on one shared time
axis."""

from __future__ import annotations

from itertools import groupby

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

from stagelens.diagnosis.tail import OWN, UNEXPLAINED, by_stage
from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.engine_hooks.records.waits import PREEMPTED
from stagelens.fmt import seconds
from stagelens.vocabulary import COLD_PATH, KV_CACHE, SCHEDULER

KINDS = {"queue": ("░", "yellow"), "prefill": ("▓", "cyan"), "decode": ("█", "green"),
         "preempted": ("▒", "red")}
_PRIORITY = ("preempted", "prefill", "queue", "decode")   # a short phase still gets its column
SHORT = {KV_CACHE: "kv", SCHEDULER: "sched", COLD_PATH: "cold", UNEXPLAINED: "queue", OWN: "own"}
BLAME_W = 10


def blame(timeline: RequestTimeline) -> str:
    """The stage that took most of the request's latency and its share ("cold 91%"); "queue" when
    a queue the engine gave no reason for did; "own" when its own work did; "" when the timeline
    carries no split (an older bundle)."""
    stages = by_stage(timeline.latency_components)
    total = sum(stages.values())
    if not total:
        return ""
    top = max(stages, key=stages.get)
    return f"{SHORT.get(top, top)} {stages[top] / total:.0%}"


def legend() -> Text:
    text = Text()
    for name, (char, color) in KINDS.items():
        text.append(char * 2, style=color)
        text.append(f" {name}  ")
    return text


def phase_at(t: float, timeline: RequestTimeline) -> str:
    for w in timeline.waits:
        if w.start <= t < w.end:
            return "preempted" if w.reason == PREEMPTED else "queue"
    chunks = timeline.chunks
    if chunks:
        if t < chunks[0].start:
            return "queue"
        if t <= chunks[-1].end:
            return "prefill"
        return "decode"
    first = timeline.first_token
    return "decode" if first is not None and t >= first else "queue"


def bar_cells(timeline: RequestTimeline, cells: int, scale: float) -> list[str]:
    """The phase of each cell of a bar `cells` long for a request of the longest shown latency
    `scale`."""
    start = timeline.arrival
    end = timeline.finished or start
    used = max(1, round((end - start) / scale * cells)) if scale > 0 else 1
    out = []
    for c in range(min(used, cells)):
        samples = [start + (c + (k + 0.5) / 4) * (end - start) / used for k in range(4)]
        phases = {phase_at(t, timeline) for t in samples}
        out.append(next(p for p in _PRIORITY if p in phases))
    return out


class Waterfall:
    """`rows` reserves that many lines once a request is shown, so the panel keeps its height
    from frame to frame (a panel that changes height moves everything below it and costs a layout
    of the screen)."""

    def __init__(self, timelines: list[RequestTimeline], rows: int = 0) -> None:
        self.timelines, self.rows = timelines, rows

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not self.timelines:
            yield Text("no finished requests yet", style="grey50")
            return
        blank = max(0, self.rows - len(self.timelines))
        width = options.max_width
        label_w = 22 if width >= 70 else 12
        total_w = 8
        blames = [blame(t) for t in self.timelines]
        blame_w = BLAME_W if width >= 60 and any(blames) else 0     # older sources carry no split
        cells = max(8, width - label_w - total_w - blame_w - 2)
        scale = max((t.latency_s or 0.0) for t in self.timelines) or 1.0
        for t, who in zip(self.timelines, blames, strict=True):
            rid = str(t.request_id)
            tokens = f"{t.prompt_tokens}→{t.output_tokens}"
            label = f"{rid[-8:]:<8} {tokens:>12}" if label_w == 22 else f"{tokens:>{label_w - 1}}"
            line = Text(f"{label:<{label_w}}"[:label_w] + " ")
            phases = bar_cells(t, cells, scale)
            for phase, run in groupby(phases):
                char, color = KINDS[phase]
                line.append(char * len(list(run)), style=color)
            line.append(" " * (cells - len(phases)))
            line.append(f" {seconds(t.latency_s):>{total_w - 1}}")
            if blame_w:
                line.append(f" {who:>{blame_w - 1}}", style="bold")
            yield line
        yield from (Text("") for _ in range(blank))
        yield legend()
