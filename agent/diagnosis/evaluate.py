"""Diagnosis as a pure function of a window of frames.

Each frame gives every signal a state; a stage's raw level in a frame is its worst known signal.
Hysteresis turns raw levels into the reported state: a worse state must hold for `rise` samples in
a row, a better one for `clear`, so states never flap. When several stages are at the verdict's
level, the root is the one whose state began first, the chain's order breaking ties.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import deque

from stagelens.diagnosis.config import DiagnosisConfig, Threshold
from stagelens.diagnosis.explain import KV_WALL_SIGNALS, consequence_advice, explain
from stagelens.diagnosis.model import Diagnosis, Evidence, StageDiagnosis, severity
from stagelens.diagnosis.signals import (
    NOT_APPLICABLE,
    SIGNALS,
    TAIL_SHARE,
    UNKNOWN,
    Bounded,
    NotJudged,
    Signal,
    Unresolved,
    window_tail,
)
from stagelens.diagnosis.tail import Tail
from stagelens.engine_hooks.records.timeline import QUEUED
from stagelens.frame import Frame
from stagelens.runbook_files import stage_runbook
from stagelens.vocabulary import KV_CACHE, SCHEDULER, STAGES, stage_of


def threshold_level(value: float, warn: float | None, firing: float | None, direction: str) -> str:
    """ok | warn | firing for a number against its thresholds; `direction` "above" means higher
    is worse."""
    worse = (lambda v, t: v > t) if direction == "above" else (lambda v, t: v < t)
    if firing is not None and worse(value, firing):
        return "firing"
    if warn is not None and worse(value, warn):
        return "warn"
    return "ok"


def signal_state(signal: Signal, threshold: Threshold, value) -> str:
    return judged(signal, threshold, value)[0]


def judged(signal: Signal, threshold: Threshold, value) -> tuple[str, object]:
    """(state, the value as judged) of a signal's reading. Bounds on the same side of every
    threshold give their state; bounds straddling one are settled by their estimate, kept within
    them (shown as a plain value where it is worse than the bounds guarantee), else judged by the
    state they guarantee (the lower bound's where higher is worse) and marked Unresolved: a value
    not known closer never makes a stage whose other evidence is healthy unknown."""
    if value is UNKNOWN:
        return "unknown", value
    if value is NOT_APPLICABLE:
        return "ok", value
    if isinstance(value, NotJudged):
        return "info", value
    def level(v: float) -> str:
        return threshold_level(v, threshold.warn, threshold.firing, signal.direction)
    if not isinstance(value, Bounded):
        return level(value), value
    above = signal.direction == "above"
    low = level(value.at_least)
    high = level(value.at_most) if value.at_most is not None else "firing" if above else "ok"
    if low == high:
        return low, value
    guaranteed = low if above else high
    if value.estimate is None:
        return guaranteed, Unresolved(value.at_least, value.at_most)
    kept = max(value.at_least, value.estimate)
    kept = kept if value.at_most is None else min(value.at_most, kept)
    # an estimate that adds nothing to what the bounds guarantee leaves the bound shown
    return (guaranteed, value) if level(kept) == guaranteed else (level(kept), kept)


# the bound that decides each state
# the KV signals that say requests could not get memory
KV_PRESSURE_SIGNALS = KV_WALL_SIGNALS | {"preemption_with_free_memory"}
_BOUND_SHOWN = {"ok": "at_most", "warn": "at_least", "firing": "at_least"}


def shown_bound(value, state: str) -> str | None:
    """Which bound of a bounded value its evidence shows ("at_least" when it is in trouble,
    "at_most" when it is ok); None for a plain value, or bounds straddling a threshold (nothing
    shown)."""
    bound = _BOUND_SHOWN.get(state) if isinstance(value, Bounded) else None
    return bound if bound is not None and getattr(value, bound) is not None else None


def shown_value(value, state: str) -> float | None:
    """The number a signal's evidence shows: a bounded value's bound that decided its state
    (shown_bound), none while its bounds straddle a threshold."""
    if isinstance(value, NotJudged):
        return value.value
    if isinstance(value, Bounded):
        bound = shown_bound(value, state)
        return None if bound is None else getattr(value, bound)
    return value if isinstance(value, int | float) else None


class StageTracker:
    """The hysteresis of one stage over successive frames.

    A worse level is held for `rise` known samples before it is reported, a better one for
    `clear`. An unknown reading (no signal of the stage readable in that frame) keeps a warn or
    firing state until `clear` of them come in a row (ok is never kept on no data), and keeps the
    known levels before it: on a bursty engine a signal comes and goes, and its firing samples
    still add up. An engine gone (`gone`) is unknown at once. A firing reading not yet held for
    `rise` samples is reported as warn (`unconfirmed` says for how many samples it has fired),
    never hidden behind ok: a stage whose signal fires now is never ok."""

    def __init__(self, rise: int, clear: int) -> None:
        self.rise, self.clear = rise, clear
        self.state = "unknown"            # what is reported
        self.since: float | None = None
        # samples in a row firing while the held level is below warn
        self.unconfirmed = 0
        self._held = "unknown"            # the level the hysteresis holds
        self._known: deque[str] = deque(maxlen=max(rise, clear))   # the latest known raw levels
        self._unknown_run = 0

    def update(self, raw: str, t: float, gone: bool = False) -> None:
        if raw == "unknown":
            self._unknown_run += 1
            # trouble is not cleared by a sample that could not be read, until as many as would
            # clear it; ok is never kept on no data
            if gone or severity(self.state) < severity("warn") or self._unknown_run >= self.clear:
                self._known.clear()
                self._held, self.unconfirmed = "unknown", 0
                self._set("unknown", t)
            return
        self._unknown_run = 0
        self._known.append(raw)
        self._held = self._hold(list(self._known))
        firing_run = _trailing(self._known, "firing")
        self.unconfirmed = firing_run if severity(self._held) < severity("warn") else 0
        self._set("warn" if self.unconfirmed else self._held, t)

    def _hold(self, known: list[str]) -> str:
        held_up = min(known[-self.rise:], key=severity) if len(known) >= self.rise else "ok"
        if severity(held_up) > severity(self._held):
            return held_up
        if len(known) >= self.clear:
            held_down = max(known[-self.clear:], key=severity)
            if severity(held_down) < severity(self._held):
                return held_down
        return "ok" if self._held == "unknown" else self._held

    def _set(self, state: str, t: float) -> None:
        if state != self.state or self.since is None:
            self.state, self.since = state, t


def _trailing(levels, level: str) -> int:
    """How many of the latest `levels` in a row are `level`."""
    run = 0
    for seen in reversed(levels):
        if seen != level:
            break
        run += 1
    return run


def read_signal(signal: Signal, frame: Frame, window: list[Frame]):
    """The signal's value in this frame; UNKNOWN unless it is a finite number (or a marker): a NaN
    compares false with every threshold, so it would otherwise be judged ok."""
    try:
        value = signal.read(frame, window)
    except (KeyError, TypeError, AttributeError, ZeroDivisionError):
        # a frame from an older or partial source: the signal is unknown, not wrong
        return UNKNOWN
    if value is NOT_APPLICABLE and not signal.published(frame):
        # an engine that never gives the figure cannot say the situation it judges did not arise
        return UNKNOWN
    if value is UNKNOWN or value is NOT_APPLICABLE:
        return value
    numbers: list[object] = ([value.at_least, *([] if value.at_most is None else [value.at_most])]
               if isinstance(value, Bounded) else [value.value if isinstance(value, NotJudged) else value])
    if any(isinstance(n, bool) or not isinstance(n, int | float) or (isinstance(n, float) and not math.isfinite(n))
           for n in numbers):
        return UNKNOWN
    return value


def frame_levels(frame: Frame, window: list[Frame], config: DiagnosisConfig) -> tuple[dict, dict]:
    """(signal id -> (value, state), stage -> raw level) for one frame."""
    values = {}
    for signal in SIGNALS:
        reading = read_signal(signal, frame, window)
        state, value = judged(signal, config.threshold(signal.id), reading)
        values[signal.id] = (value, state)
    raw = {}
    for stage in STAGES:
        known = [state for s in SIGNALS if s.stage == stage and not s.advisory
                 for state in [values[s.id][1]] if state not in ("unknown", "info")]
        raw[stage] = max(known, key=severity) if known else "unknown"
    return values, raw


NOTHING_OBSERVED = "nothing to diagnose: no engine is observed and no GPU signal could be read"


def engine_failure(frame: Frame | None) -> str | None:
    """Why the engine this frame observes stopped serving (its loop died), or None."""
    return frame.engine.failure if frame is not None and frame.engine is not None else None


def unavailable_reason(frame: Frame) -> str | None:
    """Why this frame cannot be judged at all: the engine it observes is down, or it observes
    nothing."""
    failure = engine_failure(frame)
    if failure:
        return f"the engine is down: {failure}"
    if frame.engine is None and not frame.gpus():
        return NOTHING_OBSERVED
    return None


class LiveDiagnosis:
    """The diagnosis fed one frame at a time (for the agent and the TUI); `diagnose` over a list of
    frames is this fed with each of them."""

    def __init__(self, config: DiagnosisConfig | None = None) -> None:
        self.config = config or DiagnosisConfig()
        self.trackers = {stage: StageTracker(self.config.rise, self.config.clear) for stage in STAGES}
        self.values: dict = {}
        self.last: Frame | None = None
        self.unavailable: str | None = None
        self._window: deque[Frame] = deque()

    def add(self, frame: Frame) -> dict[str, tuple[str, str]]:
        """Take one frame; returns the stages whose state changed: {stage: (old, new)}."""
        self._window.append(frame)
        while self._window[0].time_unix < frame.time_unix - self.config.window_s:
            self._window.popleft()
        self.values, raw = frame_levels(frame, list(self._window), self.config)
        self.unavailable = unavailable_reason(frame)
        if self.unavailable:   # a dead engine's last window is history, not the node's state
            raw = dict.fromkeys(raw, "unknown")
        changes = {}
        for stage, tracker in self.trackers.items():
            old = tracker.state
            tracker.update(raw[stage], frame.time_unix, gone=self.unavailable is not None)
            if tracker.state != old:
                changes[stage] = (old, tracker.state)
        self.last = frame
        return changes

    def result(self) -> Diagnosis:
        stages = [_stage_result(stage, self.trackers[stage], self.values, self.last, self.config) for stage in STAGES]
        _mark_consequences(stages, self.last)
        verdict = max((s.state for s in stages), key=severity)
        unavailable = self.unavailable
        unjudged = [s.stage for s in stages if s.state == "unknown"]
        # never "ok" on nothing: every stage must have been judged
        if verdict == "ok" and unjudged:
            verdict = "unknown"
            unavailable = unavailable or f"not judged: {'; '.join(_why_unknown(stages, unjudged))}"
        blamed = _tail_blames(self.last, self.config)
        root = _root(stages, blamed)
        d = Diagnosis(verdict, root, stages, self.last.time_unix if self.last else None,
                      unavailable, engine=engine_said(self.last))
        if blamed is not None and blamed != root:
            tail = window_tail(self.last) if self.last is not None else None
            # a stage is blamed only on the latest frame's tail (_tail_blames)
            assert tail is not None
            d.disagreement = (f"the window's P99 tail blames {blamed}, the signals point at "
                              f"{root or 'no stage'}: {tail.sentence()}")
        return d


def _unresolved(value: Unresolved, threshold: Threshold) -> str:
    """Why a bounded value's state is only the one its bounds guarantee."""
    lines = [t for t in (threshold.warn, threshold.firing)
             if t is not None and value.at_least <= t
             and (value.at_most is None or t < value.at_most)]
    line = " and ".join(f"{t:g}" for t in lines)
    return (f"not resolved: the bounds straddle the line at {line}, and nothing else the engine "
            f"publishes settles it (its traces, sent to the agent, would): judged by what the "
            f"bounds guarantee")


def _why_unknown(stages: list[StageDiagnosis], unjudged: list[str]) -> list[str]:
    """For each stage not judged, why: what the unknown evidence says of itself, or that nothing
    had data."""
    out = []
    for stage in (s for s in stages if s.stage in unjudged):
        reasons = [f"{e.signal} {e.how}" for e in stage.evidence if e.state == "unknown" and e.how]
        out.append(f"{stage.stage} ({reasons[0] if reasons else 'no data for any of its signals in the window'})")
    return out


def engine_said(frame: Frame | None) -> str | None:
    """The engine the frame observes, as read: its source and, from outside, its names'
    generation."""
    info = frame.engine.engine if frame is not None and frame.engine is not None else None
    if info is None or info.source in (None, "hooks"):
        return None
    return info.generation or info.source


def stage_states(frames: list[Frame], config: DiagnosisConfig | None = None) -> list[tuple[float, dict]]:
    """The reported state of every stage after each frame: [(time_unix, {stage: state})]."""
    live = LiveDiagnosis(config)
    out: list[tuple[float, dict]] = []
    for frame in frames:
        live.add(frame)
        out.append((frame.time_unix, {stage: t.state for stage, t in live.trackers.items()}))
    return out


def diagnose(frames: list[Frame], config: DiagnosisConfig | None = None) -> Diagnosis:
    live = LiveDiagnosis(config)
    for frame in frames:
        live.add(frame)
    return live.result()


def _mark_consequences(stages: list[StageDiagnosis], frame: Frame | None) -> None:
    """A scheduler queue mostly waiting for a reason charged to another stage in trouble is its
    consequence."""
    by_name = {s.stage: s for s in stages}
    scheduler = by_name[SCHEDULER]
    if scheduler.state not in ("warn", "firing") or frame is None or frame.window is None:
        return
    advice = consequence_advice(frame)
    # no chain its signals show
    if advice is not None and by_name[advice[0]].state not in ("warn", "firing"):
        scheduler.recommendations = [r for r in scheduler.recommendations if r.text != advice[1].text]
    by_reason = frame.window.scheduler.wait_seconds_by_reason or {}
    reasons = {k: v for k, v in by_reason.items() if stage_of(k) is not None and v > 0}
    if not reasons:
        # An engine read from outside does not say why its queue waited: with KV memory pressed
        # (full, or preempting), the chain's order (memory feeds queueing) is the best account there
        # is, and is said to be one. Fragmentation alone holds no request back: vLLM and SGLang
        # admit a waiting request whenever a free block takes it.
        if by_reason.get(QUEUED, 0.0) > 0 and _kv_pressed(by_name[KV_CACHE]):
            scheduler.consequence_of = KV_CACHE
            scheduler.explanation += ("; taken as the KV cache's consequence by the chain's order "
                                      "(the engine does not say why requests waited)")
        return
    cause = stage_of(max(reasons, key=reasons.__getitem__))
    assert cause is not None   # reasons keeps those of a stage
    if cause != SCHEDULER and by_name[cause].state in ("warn", "firing"):
        scheduler.consequence_of = cause


def _kv_pressed(kv: StageDiagnosis) -> bool:
    """Whether the KV stage's trouble is the kind that holds requests in the queue: the cache full
    while they waited, or running requests preempted for its want of room."""
    return any(e.signal in KV_PRESSURE_SIGNALS and e.state in ("warn", "firing") for e in kv.evidence)


def blamed_stage(tail: Tail | None, config: DiagnosisConfig) -> str | None:
    """The stage holding at least its tail-share firing threshold of a slow tail (the largest
    such), or None."""
    if tail is None or not tail.slow:
        return None
    over = [s for s in STAGES if tail.share(s) >= (config.threshold(TAIL_SHARE.format(s)).firing or 1.0)]
    return max(over, key=tail.share, default=None)


def _tail_blames(frame: Frame | None, config: DiagnosisConfig) -> str | None:
    return blamed_stage(window_tail(frame), config) if frame is not None else None


def _root(stages: list[StageDiagnosis], blamed: str | None = None) -> str | None:
    """The most severe stage that is not another's consequence, the one the P99 tail blames first
    among equals; then the earliest; then the chain's order."""
    troubled = [s for s in stages if s.state in ("warn", "firing")]
    causes = [s for s in troubled if s.consequence_of is None] or troubled
    if not causes:
        return None
    return min(causes, key=lambda s: (-severity(s.state), s.stage != blamed, s.since_unix or 0.0,
                                      STAGES.index(s.stage))).stage


def _stage_result(stage: str, tracker: StageTracker, values: dict, frame: Frame | None,
                  config: DiagnosisConfig) -> StageDiagnosis:
    evidence = []
    window = frame.window if frame else None
    span = window.span_s if window is not None else None
    # no engine, or a frame that lies about it
    if not (isinstance(span, int | float) and math.isfinite(span)):
        span = config.window_s
    for signal in (s for s in SIGNALS if s.stage == stage):
        value, state = values.get(signal.id, (UNKNOWN, "unknown"))
        threshold = config.threshold(signal.id)
        number = shown_value(value, state)
        provenance, how = signal.provenance(frame, value)
        if isinstance(value, Unresolved):
            why = _unresolved(value, threshold)
            how = f"{how}; {why}" if how else why
        evidence.append(Evidence(signal.id, signal.label, number, threshold.warn, threshold.firing,
                                 signal.unit, f"{span:.0f}s", state,
                                 applicable=value is not NOT_APPLICABLE, provenance=provenance,
                                 how=how, bound=shown_bound(value, state)))
    evidence.sort(key=lambda e: -severity(e.state) if e.state in ("ok", "warn", "firing") else 1)
    explanation, recommendations = explain(stage, tracker.state, evidence, frame)
    if tracker.unconfirmed:
        samples = f"{tracker.unconfirmed} sample" + ("s" if tracker.unconfirmed > 1 else "")
        explanation = f"firing at {samples}, {tracker.rise} confirm it (warn until then): {explanation}"
    since = None
    if tracker.since is not None:
        since = dt.datetime.fromtimestamp(tracker.since, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return StageDiagnosis(stage, tracker.state, since, tracker.since, explanation, evidence,
                          recommendations, stage_runbook(stage))
