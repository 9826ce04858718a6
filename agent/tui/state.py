"""Everything the panels draw, folded from polls: the frame history, recent request timelines, the
diagnosis, the log of stage transitions and, after a fix, the figures before and after it.

Pure Python, no widgets: it runs on the UI thread, and tests drive it directly.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from stagelens.diagnosis import DiagnosisConfig
from stagelens.diagnosis.evaluate import LiveDiagnosis
from stagelens.diagnosis.model import Diagnosis
from stagelens.engine_hooks.records.snapshot import Window
from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.fmt import evidence_value
from stagelens.frame import Frame
from stagelens.tui.figures import frame_figures, period_figures
from stagelens.vocabulary import STAGE_NAMES


@dataclass
class LogEntry:
    time_unix: float
    # None: an event of the TUI (a fix applied), not a stage transition
    stage: str | None
    old: str
    new: str
    text: str


@dataclass
class FixRecord:
    flags: dict
    at_unix: float | None
    before: dict
    verdict_before: str
    after: dict = field(default_factory=dict)
    # the figures `whatif` predicted for after the fix, by key
    predicted: dict = field(default_factory=dict)


class TuiState:
    def __init__(self, config: DiagnosisConfig | None = None, history: int = 600,
                 timelines: int = 400) -> None:
        self.config = config or DiagnosisConfig()
        self.frames: deque[Frame] = deque(maxlen=history)
        self.timelines: OrderedDict[str, RequestTimeline] = OrderedDict()
        self.max_timelines = timelines
        self.diagnosis: Diagnosis | None = None
        self.log: deque[LogEntry] = deque(maxlen=200)
        self.fix: FixRecord | None = None
        self._live = LiveDiagnosis(self.config)

    # --- folding polls ----------------------------------------------------------------------------
    def reset(self) -> None:
        self.frames.clear()
        self.timelines.clear()
        self.log.clear()
        self.diagnosis = None
        self._live = LiveDiagnosis(self.config)

    def add(self, frames: list[Frame], timelines: list[RequestTimeline] = (), reset: bool = False) -> None:
        if reset:
            self.reset()
        for t in timelines:
            key = f"{t.request_id}@{t.arrival}"     # ids start again when an engine restarts
            self.timelines.pop(key, None)
            self.timelines[key] = t
        while len(self.timelines) > self.max_timelines:
            self.timelines.popitem(last=False)
        for frame in frames:
            self.frames.append(frame)
            self._track(frame)
        if frames:
            self.diagnosis = self._live.result()
            if self.fix is not None:
                self.fix.after = period_figures(self._since(self.fix.at_unix),
                                                list(self.timelines.values()))

    def _track(self, frame: Frame) -> None:
        for stage, (old, new) in self._live.add(frame).items():
            if not (old == "unknown" and new == "ok"):
                self.log.append(LogEntry(frame.time_unix, stage, old, new,
                                         _why(stage, self._live.values)))

    # --- the fix ----------------------------------------------------------------------------------
    def mark_fix(self, flags: dict, text: str) -> None:
        last = self.last
        verdict = self.verdict_text()
        previous = self.fix.at_unix if self.fix is not None else None
        before = period_figures(self._since(previous), list(self.timelines.values()))
        self.fix = FixRecord(dict(flags), last.time_unix if last else None, before, verdict)
        if last is not None:
            self.log.append(LogEntry(last.time_unix, None, "", "fix", f"applied {text}"))

    def _since(self, time_unix: float | None) -> list[Frame]:
        """The frames after `time_unix` (all of them for None)."""
        return [f for f in self.frames if time_unix is None or f.time_unix > time_unix]

    # --- readers ----------------------------------------------------------------------------------
    @property
    def last(self) -> Frame | None:
        return self.frames[-1] if self.frames else None

    def figures(self) -> dict:
        return frame_figures(self.last, list(self.timelines.values()))

    def verdict_text(self) -> str:
        d = self.diagnosis
        if d is None:
            return "unknown"
        return d.verdict + (f" ({STAGE_NAMES.get(d.root_stage, d.root_stage)})" if d.root_stage else "")

    def series(self, figure: Callable[[Window], float | None], n: int = 240) -> list[float | None]:
        """One window figure (`figure` reads it, e.g. `lambda w: w.kv.fragmentation_ratio`) over
        the last `n` frames, oldest first (None where a frame lacks it)."""
        return [figure(f.window) if f.window is not None else None for f in list(self.frames)[-n:]]

    def slowest(self, n: int = 8) -> list[RequestTimeline]:
        """The slowest requests among those that finished in the last frame's window."""
        last = self.last
        items = [t for t in self.timelines.values() if t.latency_s is not None]
        if last is not None and last.window is not None:
            span = last.window.span_s or 10.0
            recent = [t for t in items if (t.finished or 0) >= last.time_monotonic - max(span, 30.0)]
            items = recent or items
        return sorted(items, key=lambda t: -t.latency_s)[:n]


def _why(stage: str, values: dict) -> str:
    """The signals past a threshold in the frame of a transition, as `label value`."""
    from stagelens.diagnosis.signals import SIGNALS

    parts = []
    for s in SIGNALS:
        if s.stage != stage:
            continue
        value, state = values[s.id]
        if state in ("warn", "firing") and isinstance(value, int | float):
            parts.append(f"{s.label} {evidence_value(value, s.unit)}")
    return ", ".join(parts)
