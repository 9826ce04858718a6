"""The signals of each stage (docs/stages.md), with default thresholds, and how to read each from
frames.

A reader returns a number, `UNKNOWN` when the data is missing (no GPU, no engine, a collector that
failed, a figure the engine source does not observe) or `NOT_APPLICABLE` when the situation it
judges is absent (no model load to inflate steps, no request waiting to make low utilisation a
problem), which counts as healthy; or `Bounded` where only bounds of the value are known (an
engine's coarse histogram), judged only where both bounds give the same state. A figure of the
engine snapshot that is None is never read as absent by itself: only an observed count (no step ran,
no model loaded) says the situation is absent.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from stagelens.catalogue import at_path
from stagelens.diagnosis import wording
from stagelens.diagnosis.tail import Tail
from stagelens.engine_hooks.records.snapshot import EngineSnapshot, Window
from stagelens.engine_hooks.records.waits import MODEL_LOADING
from stagelens.frame import Frame, busier_direction
from stagelens.vocabulary import COLD_PATH, KV_CACHE, SCHEDULER


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNKNOWN = _Marker("UNKNOWN")
NOT_APPLICABLE = _Marker("NOT_APPLICABLE")


@dataclass(frozen=True)
class Bounded:
    """A value known only to lie between two bounds (an engine's coarse histogram): judged where
    both fall on the same side of each threshold; where they straddle one, by `estimate` (another
    reading of the same figure, kept within the bounds) where there is one, else by the bound
    that decides (the least it is known to be); `at_most` None: no upper bound."""
    at_least: float
    at_most: float | None
    estimate: float | None = None


@dataclass(frozen=True)
class Unresolved(Bounded):
    """Bounds that straddle a threshold with no estimate to settle them: judged by the state they
    guarantee (an engine's first queue-time bucket, 0-300 ms, guarantees none: ok), shown with the
    bound that state shows and why the value is not known closer."""


@dataclass(frozen=True)
class NotJudged:
    """A measured value shown as evidence but not judged against thresholds here, and why."""
    value: float
    why: str


CPU_BANDWIDTH = ("on a CPU, attention is bound by compute and per-call overhead, not memory "
                 "bandwidth: shown, not judged")


def _memory_bound_only(figure: Callable[[Window], float | None]):
    """A bandwidth signal, judged only where attention is memory-bound (a GPU)."""
    def read(frame: Frame, _window):
        value = _kv(frame, figure)
        if isinstance(value, float) and not _engine_of(frame).engine.on_cuda:
            return NotJudged(value, CPU_BANDWIDTH)
        return value
    return read


@dataclass(frozen=True)
class Signal:
    id: str
    stage: str
    label: str
    direction: str               # "above": higher is worse; "below": lower is worse
    warn: float | None
    firing: float | None
    unit: str
    read: Callable[[Frame, list[Frame]], object]   # (this frame, the frames of the window up to it)
    # the engine snapshot's figures it reads (paths); none: a node signal
    reads: tuple[str, ...] = ()
    # (evidence, context): its sentence after its value
    says: Callable[[object, object], str] | None = None
    # a check with its lever that never sets the stage's state by itself (what the peer tools
    # check: outputs cut at their length, failed requests, speculative decoding's acceptance)
    advisory: bool = False

    def published(self, frame: Frame) -> bool:
        """Whether the engine `frame` observes gives every figure this signal reads (published)."""
        return frame.engine is None or all(published(frame, path) for path in self.reads)

    def provenance(self, frame: Frame | None, value) -> tuple[str | None, str | None]:
        """(measured | inferred | not observable, how it was inferred) of this signal's value in
        `frame`; (None, None) when nothing was there to read (no engine for an engine signal, no
        GPU)."""
        engine = frame.engine if frame is not None else None
        inferred = (engine.inferred or {}) if self.reads and engine is not None else {}
        how = "; ".join(inferred[path] for path in self.reads if path in inferred) or None
        outside = self.reads and engine is not None and not _from_hooks(engine)
        # what an inference said of a figure it left empty is why it is unknown
        if value is UNKNOWN:
            why = "; ".join(inferred[p] for p in self.reads if p in inferred and at_path(engine, p) is None) or None
            return ("not observable", why) if outside else (None, None)
        # no data to judge: what the engine's counts say did not arise
        if value is NOT_APPLICABLE and outside:
            return "inferred", how or "the situation it judges did not arise in the window, by the engine's counts"
        return ("inferred", how) if how else ("measured", None)


# What an engine read from outside never publishes (docs/engines.md): None idle or busy, so its None
# never says that the situation the signal judges did not arise
NEVER_FROM_OUTSIDE = frozenset({"window.kv.access_efficiency",
                                "window.kv.effective_bandwidth_ratio",
                                "window.kv.bandwidth_swing_cv",
                                "window.scheduler.budget_use_while_waiting",
                                "window.cold_path.step_time_inflation"})
# ... what only its spans tell
FROM_SPANS = frozenset({"window.scheduler.head_of_line_share", "window.tail"})
# ... and what only some engines publish
BUSY_WHILE_WAITING = "window.scheduler.busy_ratio_while_waiting"


def published(frame: Frame, path: str) -> bool:
    """Whether the engine `frame` observes gives the figure at `path` at all. The hooks give
    every figure; an engine read from outside gives neither what it never publishes, nor what
    only its spans tell before any of them reached the agent, nor how busy it was while requests
    waited where it does not publish how busy it is (vLLM; SGLang has
    gpu_execution_seconds_total)."""
    if _hooked(frame):
        return True
    if path in NEVER_FROM_OUTSIDE:
        return False
    if path in FROM_SPANS:
        return bool((_engine_of(frame).intake or {}).get("traces.llm_request_spans"))
    if path == BUSY_WHILE_WAITING:
        return frame.window is not None and frame.window.scheduler.busy_ratio is not None
    return True


def _none_counted(*counts) -> bool | None:
    """Whether observed counts are all zero (the situation they count is absent); None when one
    is not observed."""
    if any(c is None for c in counts):
        return None
    return not any(counts)


def _figure(frame: Frame, figure: Callable[[Window], object],
            absent: Callable[[Window], bool | None]):
    """One of the engine window's figures: UNKNOWN without an engine or when the figure is None,
    unless `absent` (read from observed counts) says the situation it judges did not arise:
    NOT_APPLICABLE."""
    w = frame.window
    if w is None:
        return UNKNOWN
    value = figure(w)
    if value is not None:
        return value
    return NOT_APPLICABLE if absent(w) else UNKNOWN


def _no_step(w: Window) -> bool | None:
    return _none_counted(w.scheduler.steps)


def _no_request(w: Window) -> bool | None:
    """No request finished, waits or runs; where the finished are not counted (a scrape without
    the request histograms), none seen waiting in the window and none running: every wait the
    signal judges is absent."""
    s = w.scheduler
    ended = s.requests_finished if s.requests_finished is not None else s.waiting_share
    return _none_counted(ended, s.waiting, s.running)


def _decided_wait_p99(w: Window):
    """The scheduler's decided-wait P99: the value where it is measured (hooks) or inferred from
    spans, else its bounds (an engine's coarse queue-time histogram, Little's law)."""
    s = w.scheduler
    if s.decided_wait_p99_s is not None:
        return s.decided_wait_p99_s
    if s.decided_wait_p99_at_least_s is None and s.decided_wait_p99_at_most_s is None:
        return None
    return Bounded(s.decided_wait_p99_at_least_s or 0.0, s.decided_wait_p99_at_most_s,
                   s.decided_wait_estimate_s)


def kv_full_while_waiting(frame: Frame, _window) -> object:
    """The share of an outside engine's scrapes that found its KV cache with no room while
    requests queued or were preempted; the hooks measure the KV cache itself, so it is not theirs
    to judge."""
    w = frame.window
    if w is None or _hooked(frame):
        return UNKNOWN
    share = w.kv.full_while_waiting_share
    return UNKNOWN if share is None else share


def kv_wall_preemptions(frame: Frame, _window) -> object:
    """An outside engine's preemptions (SGLang: retractions) per request finished in the window,
    where requests queued; none preempted with a queue is 0, no queue is no wall to judge. The
    hooks count preemptions with their cause (preemption_with_free_memory), so not theirs."""
    w = frame.window
    if w is None or _hooked(frame):
        return UNKNOWN
    if w.kv.preemptions_per_request is not None:
        return w.kv.preemptions_per_request
    return NOT_APPLICABLE if _engine_of(frame).counters.preemptions_total is not None else UNKNOWN


def _outside_only(figure: Callable[[Window], float | None]):
    """A figure only an engine read from outside publishes (how its requests finished, its
    prefix cache, its speculative decoding): None is none of them in the window."""
    def read(frame: Frame, _window) -> object:
        w = frame.window
        if w is None or _hooked(frame):
            return UNKNOWN
        value = figure(w)
        return NOT_APPLICABLE if value is None else value
    return read


PREFIX_HITS_SHOWN = ("shown, not judged: a low share is prompts that share no prefix, not a "
                     "fault")


def _prefix_hit_share(frame: Frame, window) -> object:
    value = _outside_only(lambda w: w.kv.prefix_hit_share)(frame, window)
    return NotJudged(value, PREFIX_HITS_SHOWN) if isinstance(value, float) else value


def _kv(frame: Frame, figure: Callable[[Window], object]):
    return _figure(frame, figure, _no_step)      # no step: no KV reserved, none read


def _requests_waited(frame: Frame) -> bool | None:
    """Whether requests waited in the window; None when that is not observed."""
    w = frame.window
    if w is None:
        return None
    share = w.scheduler.waiting_share
    if share is None:
        return False if _no_step(w) else None   # no step ran: there was nothing to wait behind
    return share > 0


def memory_bandwidth_utilisation(frame: Frame, _window) -> object:
    values = [g.utilization_memory_ratio for g in frame.gpus() if g.utilization_memory_ratio is not None]
    return max(values) if values else UNKNOWN


def _share_of_frames(window: list[Frame], happened: Callable[[Frame, Frame | None], bool | None]) -> object:
    """Share of the window's frames in which something happened; UNKNOWN without engine data."""
    seen = []
    previous = None
    for f in window:
        flag = happened(f, previous)
        if flag is not None:
            seen.append(flag)
        previous = f
    return sum(seen) / len(seen) if seen else UNKNOWN


def _free_memory_refusals(frame: Frame, previous: Frame | None) -> bool | None:
    """Whether a refusal with KV memory free happened since the previous frame; None: no data (no
    engine, or counters the source does not count, which must not read as "none happened")."""
    if frame.engine is None:
        return None
    now = _refusals_with_free_memory(frame)
    if now is None:
        return None
    if previous is None or previous.engine is None:
        return False
    before = _refusals_with_free_memory(previous)
    return None if before is None else now - before > 0


def _refusals_with_free_memory(frame: Frame) -> float | None:
    """Preemptions and refused allocations with KV memory free, so far; None when either is not
    counted."""
    c = _engine_of(frame).counters
    counted = (c.preemptions_with_free_memory_total, c.allocation_failures_with_free_memory_total)
    counts = [v for v in counted if isinstance(v, int | float) and math.isfinite(v)]
    if len(counts) < len(counted):
        return None     # not counted, or a source's NaN, which would compare as "none happened"
    return sum(counts)


def preemption_with_free_memory(frame: Frame, window: list[Frame]) -> object:
    return _share_of_frames(window, _free_memory_refusals)


def _stalled(frame: Frame) -> bool:
    """Whether, read from outside, no engine step finished in the window while requests ran or
    waited: the scheduler's figures are then the last step's
    (agent.sources.inference.step_stall), not the window's."""
    w = frame.window
    return w is not None and w.scheduler.no_step_for_s is not None


def compute_utilisation(frame: Frame, _window) -> object:
    if _stalled(frame):
        return UNKNOWN
    waited = _requests_waited(frame)
    if waited is None:
        return UNKNOWN
    if not waited:
        return NOT_APPLICABLE
    gpus = [g.utilization_gpu_ratio for g in frame.gpus() if g.utilization_gpu_ratio is not None]
    if gpus and _engine_of(frame).engine.on_cuda:
        return sum(gpus) / len(gpus)
    return _while_waiting(_window_of(frame).scheduler.busy_ratio_while_waiting)


def token_budget_use(frame: Frame, _window) -> object:
    if _stalled(frame):
        return UNKNOWN
    waited = _requests_waited(frame)
    if waited is None:
        return UNKNOWN
    return _while_waiting(_window_of(frame).scheduler.budget_use_while_waiting) if waited else NOT_APPLICABLE


def _while_waiting(value: float | None) -> object:
    """A figure over the steps with requests waiting, when some waited: None is not observed."""
    return UNKNOWN if value is None else value


def head_of_line_blocking(frame: Frame, _window) -> object:
    """The share of short requests' wait spent behind long prefills; None when none of them
    waited."""
    if _stalled(frame):
        return UNKNOWN
    return _figure(frame, lambda w: w.scheduler.head_of_line_share, _no_wait)


def _no_wait(w: Window) -> bool | None:
    """No request ended in the window, or none of those that did waited."""
    s = w.scheduler
    if _none_counted(s.requests_finished):
        return True
    reasons = s.wait_seconds_by_reason
    return None if reasons is None else not any(reasons.values())


def _hooked(frame: Frame) -> bool:
    """Whether the engine snapshot comes from the hooks (or a recording older than the `source`
    field)."""
    return _from_hooks(_engine_of(frame))


def _from_hooks(engine: EngineSnapshot) -> bool:
    return engine.engine.source in (None, "hooks")


def _engine_of(frame: Frame) -> EngineSnapshot:
    """The frame's engine snapshot; AttributeError without one, which read_signal takes as not
    known."""
    if frame.engine is None:
        raise AttributeError("the frame has no engine snapshot")
    return frame.engine


def _window_of(frame: Frame) -> Window:
    """The engine snapshot's window; AttributeError without one, which read_signal takes as not
    known."""
    w = frame.window
    if w is None:
        raise AttributeError("the frame has no engine window")
    return w


def pcie_backpressure(frame: Frame, _window) -> object:
    values = [v for v in (busier_direction(g.pcie) for g in frame.gpus()) if v is not None]
    return max(values) if values else UNKNOWN


def _no_load_beside_steps(w: Window) -> bool | None:
    """No model load in the window, or decode step times measured and none of them beside a load."""
    c = w.cold_path
    if c.step_time_without_load_s is not None and c.step_time_during_load_s is None:
        return True
    return _none_counted(c.loads_in_window,
                         None if c.loads_in_progress is None else len(c.loads_in_progress))


def step_time_inflation(frame: Frame, _window) -> object:
    return _figure(frame, lambda w: w.cold_path.step_time_inflation, _no_load_beside_steps)


def requests_waiting_on_model(frame: Frame, _window) -> object:
    """Mean number of requests waiting on a model load over the window (their load-wait seconds /
    span)."""
    w = frame.window
    if w is None:
        return UNKNOWN
    reasons = w.scheduler.wait_seconds_by_reason
    if reasons is None or (MODEL_LOADING not in reasons and not _hooked(frame)):
        # the hooks charge every wait; from outside, a reason left out is one not published
        return UNKNOWN
    span = w.span_s
    return reasons.get(MODEL_LOADING, 0.0) / span if span > 0 else NOT_APPLICABLE


def threads_blocked_on_data(frame: Frame, _window) -> object:
    host = frame.node_sample.host if frame.node_sample is not None else None
    if host is None:
        return UNKNOWN
    blocked = host.process.uninterruptible_ratio if host.process is not None else None
    values = [v for v in (host.cpu_iowait_ratio, blocked) if v is not None]
    return max(values) if values else UNKNOWN


def window_tail(frame: Frame, metric: str = "ttft") -> Tail | None:
    """The window's tail, explained (agent.diagnosis.tail); None without one."""
    w = frame.window
    if w is None or w.tail is None:
        return None
    return Tail.from_figures(metric, w.tail.ttft if metric == "ttft" else w.tail.latency)


def tail_share(stage: str):
    """The share of the window's P99 TTFT tail charged to `stage`; judged only when the tail is
    slow."""
    def read(frame: Frame, _window) -> object:
        w = frame.window
        if w is None or w.tail is None or (stage == SCHEDULER and _stalled(frame)):
            # no engine, a source that does not split requests' time, or no step in the window
            return UNKNOWN
        if w.tail.ttft is None:
            return NOT_APPLICABLE if _none_counted(w.scheduler.requests_finished) else UNKNOWN
        tail = window_tail(frame)
        return tail.share(stage) if tail is not None and tail.slow else NOT_APPLICABLE
    return read


TAIL_SHARE = "{}_tail_share"     # one signal a stage: its share of the slow tail's time
_TAIL_LABEL = "share of the P99 TTFT tail's time"

SIGNALS: tuple[Signal, ...] = (
    Signal(id="kv_fragmentation_ratio", stage=KV_CACHE, label="KV fragmentation", direction="above",
           warn=0.20, firing=0.30, unit="ratio",
           read=lambda f, _w: _kv(f, lambda w: w.kv.fragmentation_ratio),
           reads=("window.kv.fragmentation_ratio",), says=wording.kv_fragmentation),
    Signal(id="kv_access_efficiency", stage=KV_CACHE, label="KV access efficiency",
           direction="below", warn=0.75, firing=0.60, unit="ratio",
           read=lambda f, _w: _kv(f, lambda w: w.kv.access_efficiency),
           reads=("window.kv.access_efficiency",), says=wording.kv_access_efficiency),
    Signal(id="effective_bandwidth_ratio", stage=KV_CACHE, label="effective KV read bandwidth",
           direction="below", warn=0.75, firing=0.60, unit="ratio",
           read=_memory_bound_only(lambda w: w.kv.effective_bandwidth_ratio),
           reads=("window.kv.effective_bandwidth_ratio",), says=wording.effective_bandwidth),
    Signal(id="bandwidth_swing_cv", stage=KV_CACHE, label="KV bandwidth swing", direction="above",
           warn=0.25, firing=0.40, unit="ratio",
           read=_memory_bound_only(lambda w: w.kv.bandwidth_swing_cv),
           reads=("window.kv.bandwidth_swing_cv",), says=wording.bandwidth_swing),
    Signal(id="memory_bandwidth_utilisation", stage=KV_CACHE, label="device memory busy",
           direction="above", warn=0.85, firing=0.95, unit="ratio",
           read=memory_bandwidth_utilisation),
    Signal(id="preemption_with_free_memory", stage=KV_CACHE,
           label="preempted or refused with KV memory free", direction="above", warn=0.0,
           firing=0.5, unit="share of samples", read=preemption_with_free_memory,
           reads=("counters.preemptions_with_free_memory_total",),
           says=wording.preempted_with_free_memory),
    # from outside: the KV cache full while a queue waits (or requests are preempted) is the KV
    # cache's doing
    Signal(id="kv_full_while_waiting", stage=KV_CACHE,
           label="KV cache full with requests queued or preempted", direction="above", warn=0.2,
           firing=0.5, unit="share of samples", read=kv_full_while_waiting,
           reads=("window.kv.full_while_waiting_share",), says=wording.kv_full_while_waiting),
    # from outside, over a window of any length: preemptions per request while a queue waits (the
    # pool ran out; vLLM V1 and SGLang preempt only then)
    Signal(id="kv_wall_preemptions", stage=KV_CACHE,
           label="preemptions per request with requests queued", direction="above", warn=0.0,
           firing=0.01, unit="per request", read=kv_wall_preemptions,
           reads=("window.kv.preemptions_per_request",), says=wording.kv_wall),
    Signal(id="prefix_cache_hit_rate", stage=KV_CACHE,
           label="prompt tokens found in the prefix cache", direction="above", warn=None,
           firing=None, unit="ratio", read=_prefix_hit_share, reads=("window.kv.prefix_hit_share",),
           advisory=True),
    Signal(id="outputs_cut_at_length", stage=KV_CACHE,
           label="requests cut at their length limit", direction="above", warn=0.10, firing=0.50,
           unit="ratio", read=_outside_only(lambda w: w.scheduler.cut_at_length_share),
           reads=("window.scheduler.cut_at_length_share",), says=wording.cut_at_length,
           advisory=True),
    Signal(id=TAIL_SHARE.format(KV_CACHE), stage=KV_CACHE, label=_TAIL_LABEL, direction="above",
           warn=0.30, firing=0.50, unit="ratio", read=tail_share(KV_CACHE), reads=("window.tail",)),
    Signal(id="scheduler_wait_p99", stage=SCHEDULER, label="scheduler wait p99", direction="above",
           warn=0.005, firing=0.020, unit="seconds",
           read=lambda f, _w: _figure(f, _decided_wait_p99, _no_request),
           reads=("window.scheduler.decided_wait_p99_s",), says=wording.scheduler_wait),
    Signal(id="compute_utilisation", stage=SCHEDULER,
           label="compute utilisation while requests wait", direction="below", warn=0.70,
           firing=0.50, unit="ratio", read=compute_utilisation,
           reads=("window.scheduler.waiting_share", "window.scheduler.busy_ratio_while_waiting"),
           says=wording.compute_idle),
    Signal(id="head_of_line_blocking", stage=SCHEDULER, label="head-of-line blocking",
           direction="above", warn=0.30, firing=0.50, unit="ratio", read=head_of_line_blocking,
           reads=("window.scheduler.head_of_line_share",), says=wording.head_of_line_blocking),
    Signal(id="token_budget_use", stage=SCHEDULER, label="token budget use while requests wait",
           direction="below", warn=0.50, firing=None, unit="ratio", read=token_budget_use,
           reads=("window.scheduler.waiting_share", "window.scheduler.budget_use_while_waiting"),
           says=wording.token_budget_use),
    Signal(id="requests_failed_share", stage=SCHEDULER,
           label="requests aborted or failed", direction="above", warn=0.01, firing=0.05,
           unit="ratio", read=_outside_only(lambda w: w.scheduler.failed_share),
           reads=("window.scheduler.failed_share",), says=wording.requests_failed, advisory=True),
    Signal(id="spec_decode_acceptance", stage=SCHEDULER,
           label="speculative draft tokens accepted", direction="below", warn=0.50, firing=0.30,
           unit="ratio", read=_outside_only(lambda w: w.scheduler.spec_acceptance),
           reads=("window.scheduler.spec_acceptance",), says=wording.spec_acceptance,
           advisory=True),
    Signal(id=TAIL_SHARE.format(SCHEDULER), stage=SCHEDULER, label=_TAIL_LABEL, direction="above",
           warn=0.30, firing=0.50, unit="ratio", read=tail_share(SCHEDULER), reads=("window.tail",)),
    Signal(id="pcie_backpressure", stage=COLD_PATH, label="PCIe backpressure", direction="above",
           warn=0.30, firing=0.50, unit="ratio", read=pcie_backpressure,
           says=wording.pcie_backpressure),
    Signal(id="step_time_inflation", stage=COLD_PATH,
           label="step-time inflation during model loads", direction="above", warn=1.20,
           firing=1.50, unit="ratio", read=step_time_inflation,
           reads=("window.cold_path.step_time_inflation",), says=wording.step_time_inflation),
    # "any" warns; "sustained" (docs/stages.md) read as: on average 0.3 requests waiting through the
    # window
    Signal(id="requests_waiting_on_model", stage=COLD_PATH,
           label="requests waiting on a model load", direction="above", warn=0.0, firing=0.3,
           unit="requests", read=requests_waiting_on_model,
           reads=("window.scheduler.wait_seconds_by_reason",), says=wording.waiting_on_model),
    Signal(id="threads_blocked_on_data", stage=COLD_PATH, label="threads blocked on data",
           direction="above", warn=0.10, firing=0.25, unit="ratio", read=threads_blocked_on_data,
           says=wording.threads_blocked),
    Signal(id=TAIL_SHARE.format(COLD_PATH), stage=COLD_PATH, label=_TAIL_LABEL, direction="above",
           warn=0.30, firing=0.50, unit="ratio", read=tail_share(COLD_PATH), reads=("window.tail",)),
)
SIGNALS_BY_ID = {s.id: s for s in SIGNALS}
