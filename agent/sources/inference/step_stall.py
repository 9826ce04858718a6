"""A step longer than the scrape interval, read from outside.

vLLM sets its scheduler gauges and observes its histograms once a step, when the step ends. On a
busy host one unchunked prefill step can outlast several scrapes: meanwhile every figure of the
scheduler is the last step's, and a window read from them says scheduler wait 0, ok, while requests
queue unseen behind the step. So when requests run or wait and the engine's step count
(`iteration_tokens`' count) did not advance since a scrape, the scheduler's figures of the window
are not judged ("no engine step finished in the window"), never ok.

What is known all the same is a floor: the waits the window's finished requests showed (the unseen
ones can only add to the P99), and the requests the gauges show waiting were waiting when the last
step ended (the gauges are that step's) and, no step having started since, still are. Their wait has
grown by at least the time since the first scrape that saw the step count where it is; past the
longest ordinary step (what any scheduler may make a request wait, as decided_waits takes it out),
that is a wait the scheduler decided.
"""

from __future__ import annotations

from collections import deque

from stagelens.sources.inference.figures import Inferred

NO_STEP = "no engine step finished in the window"


class StepWatch:
    """The engine's step count over successive scrapes: how long it has stood still; and the
    waits seen growing while it did, which stay the window's floor once the step ends (the
    requests admitted then carry that wait, and their spans come only when they finish)."""

    def __init__(self) -> None:
        self._count: float | None = None
        # monotonic: the first scrape that saw the count where it is
        self._since: float | None = None
        # (at, seconds, how) of each wait seen growing
        self._grown: deque[tuple[float, float, str]] = deque()

    def saw_growing(self, at: float, seconds: float, how: str) -> None:
        self._grown.append((at, seconds, how))

    def grown_since(self, start: float) -> Inferred | None:
        """The longest wait seen growing after `start` (the window's base), forgetting older
        ones."""
        while self._grown and self._grown[0][0] <= start:
            self._grown.popleft()
        if not self._grown:
            return None
        at, seconds, how = max(self._grown, key=lambda g: g[1])
        return Inferred(seconds, f"a wait seen growing while no step finished, {how}")

    def still_for(self, at: float, steps_total: float | None, busy: bool) -> float | None:
        """Seconds since the first scrape that saw this step count, when the count did not
        advance and requests run or wait (`busy`); None when a step finished since the last
        scrape, nothing runs, or the count is not published."""
        if steps_total is None:
            self._count = self._since = None
            return None
        if steps_total != self._count or self._since is None:
            self._count, self._since = steps_total, at
            return None
        return at - self._since if busy else None


def growing_wait(still_s: float, waiting: float | None, ordinary_step_s: float, kv_full: bool) -> Inferred | None:
    """The time the requests seen waiting have kept waiting while no step finished, less one
    ordinary step, when two or more wait for the scheduler (the P99 two requests reach:
    sustained_p99) and the KV cache is not what holds them back; None otherwise."""
    grown = still_s - ordinary_step_s
    if kv_full or waiting is None or waiting < 2 or grown <= 0:
        return None
    return Inferred(grown, f"the {waiting:.0f} requests waiting at the last step's end still "
                           f"waited {still_s:.1f} s on, less one ordinary step "
                           f"({ordinary_step_s * 1000:.0f} ms)")


def stalled_wait(still_s: float, kv_full: bool, floors: list[Inferred | None]) -> Inferred:
    """What the scheduler's decided-wait P99 is known to be while no step finishes: a floor,
    never the whole (the requests queued behind the step are not seen yet): the most of `floors`
    (what the window's finished requests showed, the waits seen growing in it), value None when
    none is above 0, saying why."""
    why = f"{NO_STEP} ({still_s:.1f} s since the engine's step count last moved, requests running or waiting)"
    if kv_full:
        why += "; the KV cache is full: the queue waits for blocks, not for the scheduler"
    known = [f for f in floors if f is not None and f.value]
    if not known:
        return Inferred(None, why)
    top = max(known, key=lambda f: f.value)
    return Inferred(top.value, f"{top.how}; at least that, as {why}")
