"""A step longer than the scrape interval, read from outside.

vLLM sets its scheduler gauges and observes its histograms once a step, when the step ends. On a busy host one
unchunked prefill step can outlast several scrapes: meanwhile every figure of the scheduler is the last step's,
and a window read from them says scheduler wait 0, ok, while requests queue unseen behind the step. So when
requests run or wait and the engine's step count (`iteration_tokens`' count) did not advance since a scrape,
the scheduler's figures of the window are not judged ("no engine step finished in the window"), never ok.

What is known all the same is a floor: the waits the window's finished requests showed (the unseen ones can
only add to the P99), and the requests the gauges show waiting were waiting when the last step ended (the gauges
are that step's) and, no step having started since, still are. Their wait has grown by at least the time since
the first scrape that saw the step count where it is; past the longest ordinary step (what any scheduler may
make a request wait, as decided_waits takes it out), that is a wait the scheduler decided.
"""

from __future__ import annotations

from agent.sources.inference import Inferred

NO_STEP = "no engine step finished in the window"


class StepWatch:
    """The engine's step count over successive scrapes: how long it has stood still."""

    def __init__(self) -> None:
        self._count: float | None = None
        self._since: float | None = None     # monotonic: the first scrape that saw the count where it is

    def still_for(self, at: float, steps_total: float | None, busy: bool) -> float | None:
        """Seconds since the first scrape that saw this step count, when the count did not advance and requests
        run or wait (`busy`); None when a step finished since the last scrape, nothing runs, or the count is not
        published."""
        if steps_total is None:
            self._count = self._since = None
            return None
        if steps_total != self._count or self._since is None:
            self._count, self._since = steps_total, at
            return None
        return at - self._since if busy else None


def stalled_wait(still_s: float, waiting: float | None, ordinary_step_s: float, kv_full: bool,
                 seen: Inferred | None = None) -> Inferred:
    """What the scheduler's decided-wait P99 is known to be while no step finishes: a floor, never the whole
    (the requests queued behind the step are not seen yet). The floor is the most of what the window's finished
    requests showed (`seen`, its value and how it was found) and the time the requests seen waiting have waited
    since (less one ordinary step), when two or more wait for the scheduler (the P99 two requests reach:
    sustained_p99). Value None when neither is above 0, saying why."""
    why = f"{NO_STEP} ({still_s:.1f} s since the engine's step count last moved, requests running or waiting)"
    floors = []
    grown = still_s - ordinary_step_s
    if kv_full:
        why += "; the KV cache is full: the queue waits for blocks, not for the scheduler"
    elif waiting is not None and waiting >= 2 and grown > 0:
        floors.append((grown, f"{why}: the {waiting:.0f} requests waiting at the last step's end still wait, "
                              f"{still_s:.1f} s on, less one ordinary step ({ordinary_step_s * 1000:.0f} ms): at "
                              "least that"))
    if seen is not None and seen.value:
        floors.append((seen.value, f"{seen.how}; at least that, as {why}"))
    return Inferred(*max(floors)) if floors else Inferred(None, why)
