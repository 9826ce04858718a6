"""Per-request timelines: every wait with its reason, every prefill chunk, preemption and resume.

The wait accounting runs at each scheduling decision: the time a request spent waiting since the
previous decision is charged to the reason that decision gave it. A request that arrived while a
step was running waited for that step: behind a long prefill if the step carried one, else at the
step boundary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from stagelens.engine_hooks.records.waits import PREEMPTED

# Reasons beyond the scheduler's own (engine_hooks.records.waits)
BEHIND_LONG_PREFILL = "behind_long_prefill"
STEP_BOUNDARY = "step_boundary"
# A wait whose reason the engine did not publish: an engine read from outside (vLLM's
# `time_in_queue`)
QUEUED = "queued"


@dataclass
class Wait:
    start: float
    end: float
    reason: str
    step: int | None = None          # the step that held the request, for head-of-line waits
    held_by: str | None = None       # the long prefill's request

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class PrefillChunk:
    start: float
    end: float
    tokens: int
    step: int


@dataclass
class RequestTimeline:
    request_id: str
    model: str
    prompt_tokens: int
    output_tokens: int = 0
    arrival: float = 0.0
    finished: float | None = None
    finish_reason: str | None = None
    first_token: float | None = None
    events: list[tuple[float, str]] = field(default_factory=list)
    chunks: list[PrefillChunk] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)
    preemptions: int = 0
    # where its time went (engine_hooks.records.attribution): component -> seconds, up to the first
    # token and to the end
    ttft_components: dict[str, float] | None = None
    latency_components: dict[str, float] | None = None
    # the engine's own trace of it (an outside engine's span): 32 hex digits
    trace_id: str | None = None

    @property
    def ttft_s(self) -> float | None:
        """Arrival to the first token; None before it."""
        return self.first_token - self.arrival if self.first_token is not None else None

    @property
    def latency_s(self) -> float | None:
        """Arrival to the end; None while it runs."""
        return self.finished - self.arrival if self.finished is not None else None

    @property
    def scheduler_wait_s(self) -> float:
        """Arrival to first scheduled, plus every wait after a preemption."""
        return sum(w.seconds for w in self.waits)

    @property
    def decided_wait_s(self) -> float:
        """The part of the wait the scheduler chose: all but waiting for the running step to end,
        which iteration-level scheduling makes every request pay."""
        return sum(w.seconds for w in self.waits if w.reason != STEP_BOUNDARY)

    def wait_by_reason(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for w in self.waits:
            out[w.reason] = out.get(w.reason, 0.0) + w.seconds
        return out

    @classmethod
    def from_dict(cls, d: dict) -> RequestTimeline:
        """Back from `to_dict` (a recorded bundle, an API answer); the derived fields are
        recomputed."""
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["events"] = [(e["t"], e["event"]) for e in d.get("events") or []]
        known["chunks"] = [PrefillChunk(c["start"], c["end"], c.get("tokens", 0), c.get("step", 0))
                           for c in d.get("chunks") or []]
        known["waits"] = [Wait(**{k: w.get(k) for k in ("start", "end", "reason", "step", "held_by")})
                          for w in d.get("waits") or []]
        return cls(**known)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["events"] = [{"t": t, "event": e} for t, e in self.events]
        d["scheduler_wait_s"] = self.scheduler_wait_s
        d["decided_wait_s"] = self.decided_wait_s
        d["ttft_s"] = self.ttft_s
        d["latency_s"] = self.latency_s
        return d


class WaitTracker:
    """Charges waiting time to reasons; one instance per instrumented engine, engine thread only."""

    def __init__(self) -> None:
        # request -> reason from last decision
        self._reason: dict[str, tuple[str, int | None, str | None]] = {}
        # request -> charged up to
        self._since: dict[str, float] = {}

    def charge(self, timeline: RequestTimeline, now: float, previous_step: tuple[int, float, str | None] | None,
               preempted: bool) -> tuple[str, float] | None:
        """Charge the wait since the last decision; returns (reason, seconds) charged.

        `previous_step`: (index, end, long prefill request) of the step before this decision.
        """
        rid = timeline.request_id
        since = self._since.get(rid, timeline.arrival)
        if now <= since:
            return None
        if rid in self._reason:
            reason, step, held_by = self._reason[rid]
        elif previous_step is not None and previous_step[2] is not None and since < previous_step[1]:
            reason, step, held_by = BEHIND_LONG_PREFILL, previous_step[0], previous_step[2]
        else:
            reason, step, held_by = STEP_BOUNDARY, None, None
        if preempted:
            reason = PREEMPTED
        last = timeline.waits[-1] if timeline.waits else None
        if last is not None and last.reason == reason and last.held_by == held_by and abs(last.end - since) < 1e-9:
            last.end = now
        else:
            timeline.waits.append(Wait(since, now, reason, step, held_by))
        self._since[rid] = now
        return reason, now - since

    def decide(self, rid: str, reason: str, step: int | None = None, held_by: str | None = None) -> None:
        self._reason[rid] = (reason, step, held_by)

    def requeued(self, rid: str, now: float) -> None:
        """A preempted request starts waiting again now."""
        self._reason.pop(rid, None)
        self._since[rid] = now

    def scheduled(self, rid: str) -> None:
        self._reason.pop(rid, None)
        self._since.pop(rid, None)

    def pending_since(self, rid: str, default: float) -> float:
        return self._since.get(rid, default)

    def pending_reason(self, rid: str) -> str | None:
        entry = self._reason.get(rid)
        return entry[0] if entry else None
