"""A run judged whole, not only by its last window: each stage's episodes (when it was warn or
firing, with its peak evidence), the tail of the run's requests explained, and a verdict that names
the stage behind the run's P99 when the tail is attributable. The last window's diagnosis stays as
"at the end".

A lab run, a recorded bundle and a replay all come here with their frames and request timelines.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from stagelens.diagnosis.config import DiagnosisConfig
from stagelens.diagnosis.evaluate import LiveDiagnosis, blamed_stage, threshold_level
from stagelens.diagnosis.explain import explain
from stagelens.diagnosis.model import Diagnosis, Evidence, StageDiagnosis, severity
from stagelens.diagnosis.signals import SIGNALS_BY_ID, TAIL_SHARE
from stagelens.diagnosis.tail import Tail
from stagelens.engine_hooks.records.attribution import tail as tail_figures
from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.frame import Frame

TAIL_QUANTILE = 0.99


@dataclass
class Episode:
    """A stretch of samples in which a stage was reported warn or firing."""
    stage: str
    state: str                  # the worst it reached
    start_unix: float
    end_unix: float             # its last sample
    peak_unix: float
    peak: Evidence | None       # the signal furthest past its threshold, at the peak
    open: bool = False          # still on at the end of the run
    # the diagnosis window: the episode judges requests from this long before it
    window_s: float = 0.0
    peak_key: tuple = field(default=(0, 0.0), repr=False)   # (severity, pressure) at the peak

    def covers(self, t_unix: float) -> bool:
        return self.start_unix - self.window_s <= t_unix <= self.end_unix

    def to_dict(self) -> dict:
        return {"stage": self.stage, "state": self.state, "from": _rfc3339(self.start_unix),
                "to": _rfc3339(self.end_unix), "seconds": self.end_unix - self.start_unix,
                "open_at_end": self.open, "peak_at": _rfc3339(self.peak_unix),
                "peak": self.peak.to_dict() if self.peak else None}


@dataclass
class RunDiagnosis:
    diagnosis: Diagnosis               # the run's verdict
    at_end: Diagnosis                  # the last window's
    basis: str                         # "tail": the stage the tail blames; "end": the last window
    tail: Tail | None
    episodes: list[Episode] = field(default_factory=list)
    # indexes of the episodes the tail fell in
    tail_episodes: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"verdict": self.diagnosis.to_dict(), "basis": self.basis,
                "tail": self.tail.to_dict() if self.tail else None,
                "episodes": [e.to_dict() for e in self.episodes],
                "tail_episodes": self.tail_episodes, "at_end": self.at_end.to_dict()}


def judge_run(frames: Iterable[Frame], timelines: list[RequestTimeline],
              config: DiagnosisConfig | None = None) -> RunDiagnosis:
    judge = RunJudge(config)
    for frame in frames:
        judge.add(frame)
    return judge.finish(timelines)


class RunJudge:
    """A run judged a frame at a time (`judge_run`), so that a replay streams its bundle: it keeps
    the diagnosis window, each stage's episodes, the first and last frame and, per stage, the frame
    and diagnosis at the peak of its worst episode (where the tail may base the verdict) — never
    every frame."""

    def __init__(self, config: DiagnosisConfig | None = None) -> None:
        self.config = config or DiagnosisConfig()
        self.live = LiveDiagnosis(self.config)
        self.episodes = Episodes(self.config.window_s)
        self.frames = 0
        self.first: Frame | None = None
        self.last: tuple[Diagnosis, Frame] | None = None
        # stage -> (peak key, the diagnosis and frame there) of its worst episode so far
        self.peaks: dict[str, tuple[tuple, Diagnosis, Frame]] = {}

    def add(self, frame: Frame) -> None:
        self.live.add(frame)
        diagnosis = self.live.result()
        self.frames += 1
        self.first = self.first or frame
        self.last = (diagnosis, frame)
        for ep in self.episodes.add(diagnosis):
            best = self.peaks.get(ep.stage)
            # the first episode to reach a peak keeps it, as max() over them would
            if best is None or ep.peak_key > best[0]:
                self.peaks[ep.stage] = (ep.peak_key, diagnosis, frame)

    def finish(self, timelines: list[RequestTimeline]) -> RunDiagnosis:
        at_end = self.last[0] if self.last else self.live.result()
        episodes = self.episodes.closed()
        tail = Tail.from_figures("ttft", tail_figures(timelines, "ttft", TAIL_QUANTILE))
        in_tail = _tail_episodes(tail, timelines, self.first, episodes)
        blamed = blamed_stage(tail, self.config)
        if blamed is None or tail is None:   # no tail blames no stage
            return RunDiagnosis(at_end, at_end, "end", tail, episodes, in_tail)
        peak = self.peaks.get(blamed)
        base, frame = (peak[1], peak[2]) if peak else (at_end, self.last[1] if self.last else None)
        verdict = _blame(base, frame, blamed, tail, self.config)
        return RunDiagnosis(verdict, at_end, "tail", tail, episodes, in_tail)


def find_episodes(diagnoses: Iterable[Diagnosis], window_s: float = 0.0) -> list[Episode]:
    found = Episodes(window_s)
    for d in diagnoses:
        found.add(d)
    return found.closed()


class Episodes:
    """Each stage's episodes, a diagnosis at a time."""

    def __init__(self, window_s: float = 0.0) -> None:
        self.window_s = window_s
        self.found: list[Episode] = []
        self.current: dict[str, Episode] = {}

    def add(self, d: Diagnosis) -> list[Episode]:
        """Take the next diagnosis; returns the episodes whose peak is at it."""
        t = d.time_unix or 0.0
        peaked = []
        for s in d.stages:
            ep = self.current.get(s.stage)
            if s.state in ("warn", "firing"):
                peak = _worst_evidence(s)
                key = (severity(s.state), _pressure(peak))
                if ep is None:
                    ep = self.current[s.stage] = Episode(s.stage, s.state, t, t, t, peak,
                                                         window_s=self.window_s, peak_key=key)
                    self.found.append(ep)
                    peaked.append(ep)
                ep.end_unix = t
                if key > ep.peak_key:
                    ep.state, ep.peak_unix, ep.peak, ep.peak_key = s.state, t, peak, key
                    peaked.append(ep)
            elif ep is not None:
                del self.current[s.stage]
        return peaked

    def closed(self) -> list[Episode]:
        """Every episode, those still on marked open (at the end of the run)."""
        for ep in self.current.values():
            ep.open = True
        return self.found


def _worst_evidence(stage: StageDiagnosis) -> Evidence | None:
    judged = [e for e in stage.evidence if e.state in ("warn", "firing")]
    return max(judged, key=lambda e: (severity(e.state), _pressure(e)), default=None)


def _pressure(e: Evidence | None) -> float:
    """How far past its warn threshold a value is, as a ratio (1 = at the threshold)."""
    if e is None or e.value is None or e.warn is None:
        return 0.0
    signal = SIGNALS_BY_ID.get(e.signal)
    if signal is not None and signal.direction == "below":
        return e.warn / e.value if e.value > 0 else float("inf")
    return e.value / e.warn if e.warn > 0 else (float("inf") if e.value > 0 else 0.0)


def _blame(base: Diagnosis, frame: Frame | None, stage: str, tail: Tail, config: DiagnosisConfig) -> Diagnosis:
    """`base` with `stage` judged on the run's tail as well: its share of the tail is evidence,
    the stage is at least at that evidence's level, and it is the root."""
    signal = SIGNALS_BY_ID[TAIL_SHARE.format(stage)]
    threshold = config.threshold(signal.id)
    share = tail.share(stage)
    level = threshold_level(share, threshold.warn, threshold.firing, signal.direction)
    row = Evidence(signal.id, "share of the run's P99 TTFT tail", share, threshold.warn,
                   threshold.firing, signal.unit, "run", level)
    out = copy.deepcopy(base)
    target = out.stage(stage)
    target.evidence = [row] + [e for e in target.evidence if e.signal != signal.id]
    state = max(target.state, level, key=severity)
    if state != target.state or not target.recommendations:
        explanation, target.recommendations = explain(stage, state, target.evidence, frame)
        target.explanation = explanation
        target.state = state
    target.explanation = f"{tail.sentence()} — {target.explanation}"
    target.consequence_of = None
    out.root_stage = stage
    out.verdict = max((s.state for s in out.stages), key=severity)
    return out


def _tail_episodes(tail: Tail | None, timelines: list[RequestTimeline], first_frame: Frame | None,
                   episodes: list[Episode]) -> list[int]:
    """The episodes the tail's requests arrived in or waited through (monotonic times made
    wall-clock by the first frame's clocks)."""
    if tail is None or first_frame is None or not episodes:
        return []
    to_unix = first_frame.time_unix - first_frame.time_monotonic
    members = [(t.arrival, first) for t in timelines
               if (first := t.first_token) is not None and first - t.arrival >= tail.threshold_s]
    hit = set()
    for arrival, first_token in members:
        start, end = arrival + to_unix, first_token + to_unix
        for i, ep in enumerate(episodes):
            if ep.covers(start) or ep.covers(end) or (start <= ep.start_unix and ep.end_unix <= end):
                hit.add(i)
    return sorted(hit)


def _rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
