"""The scheduler's part of the engine snapshot, built from one scrape window (window.py).

In two steps, so that the source can set between them what a step outlasting the scrapes says of
the decided wait (agent.sources.inference.step_stall, which remembers across windows):
`window_waits` reads what the window says of its requests' waits (by reason, the share of samples
with a queue, the decided-wait P99 or its bounds), and `scheduler_figures` the rest (requests,
steps and tokens, the queue-time quantiles, head-of-line blocking, SGLang's GPU busy share) into
the snapshot's SchedulerFigures.
"""

from __future__ import annotations

from dataclasses import dataclass

from stagelens.engine_hooks.records.snapshot import SchedulerFigures
from stagelens.sources.inference.figures import (
    Inferred,
    decided_wait_p99,
    head_of_line_share,
    ordinary_step_bounds,
    queued_mean_wait,
    step_period,
    wait_seconds_by_reason,
    waiting_share,
)
from stagelens.sources.inference.wait_bounds import WaitBounds, queue_wait_p99_bounds
from stagelens.sources.scrape.families import (
    HistogramDelta,
    by_label,
    quantile,
    quantile_said,
    values,
)
from stagelens.sources.scrape.window import ScrapeWindow, infer, per_s, whole

DECIDED = "window.scheduler.decided_wait_p99_s"


@dataclass(frozen=True, slots=True)
class Waits:
    """What one window says of its requests' waits, and how each inferred figure was read (by
    path): waiting seconds by reason, the share of the window's samples with a queue, the mean step
    and the longest ordinary one (or the mean; 0: not known), in seconds, and the decided-wait P99
    where it is known, else its bounds where they are."""
    by_reason: dict[str, float] | None
    waiting_share: float | None
    step_period: float | None
    ordinary_step: float
    decided: Inferred | None
    bounds: WaitBounds | None
    inferred: dict[str, str]


def window_waits(w: ScrapeWindow) -> Waits:
    """The window's waits: by reason, the share of samples waiting, and the P99 the scheduler
    decided (from the spans, else bounded by the queue-time histogram and the queue's gauges)."""
    inferred: dict[str, str] = {}
    queue, ttft, itl = w.histogram("queue_time"), w.histogram("ttft"), w.histogram("inter_token")
    steps = w.histogram("iteration_tokens")
    period = step_period(w.span, _count(steps))
    by_reason = infer(inferred, "window.scheduler.wait_seconds_by_reason",
                      wait_seconds_by_reason(w.gauges, w.span))
    share = None
    if w.span:
        share = infer(inferred, "window.scheduler.waiting_share", waiting_share(w.gauges))
    # spans tell of a request only when it ends: with them, the requests still queued bound the
    # wait too
    admitted = max((h.count for h in (ttft, queue) if h is not None), default=None)
    queued = None
    if w.with_spans:
        queued = queued_mean_wait(by_reason, admitted, w.now.gauges.waiting)
    # one pass over the window's spans
    ordinary, longest = ordinary_step_bounds(itl, w.timelines, steps)
    found = decided_wait_p99(w.timelines, period, ordinary, queued, longest, w.now.gauges.waiting) \
        if w.span else None
    # a floor only where the few requests finished say less than those still queued wait
    decided, bounds = (None, found) if isinstance(found, WaitBounds) else (found, None)
    if found is not None:
        inferred[DECIDED] = found.how
    elif w.span:
        bounds = _queue_bounds(w, queue, period)
        if bounds is not None:
            inferred[DECIDED] = bounds.how
    return Waits(by_reason=by_reason, waiting_share=share, step_period=period,
                 ordinary_step=max(period or 0.0, ordinary or 0.0), decided=decided, bounds=bounds,
                 inferred=inferred)


def _queue_bounds(w: ScrapeWindow, queue: HistogramDelta | None,
                  period: float | None) -> WaitBounds | None:
    """The decided-wait P99's bounds without spans: the queue-time buckets, the queue's gauges."""
    done = queue or w.histogram("e2e")
    left = done.count / w.span if done is not None else None
    waiting = [g.waiting for g in w.gauges if g.waiting is not None]
    return queue_wait_p99_bounds(queue, waiting, left, w.span, period)


def scheduler_figures(w: ScrapeWindow, waits: Waits, no_step_for_s: float | None = None,
                      ) -> tuple[SchedulerFigures, dict[str, str]]:
    """The window's scheduler figures from its waits (`window_waits`, a stall's floor set) and
    `no_step_for_s` (how long no step finished, where requests ran or waited); with how the
    inferred ones were read."""
    inferred = dict(waits.inferred)
    queue, e2e = w.histogram("queue_time"), w.histogram("e2e")
    steps = w.histogram("iteration_tokens")
    for q, level in (("p50", 0.50), ("p99", 0.99)):
        said = quantile_said(queue, level)
        if said is not None and quantile(queue, level) is None:
            inferred[f"window.scheduler.wait_{q}_s"] = \
                f"{said}: as far as the queue-time buckets place it"
    computed, generated = _tokens(w, steps)
    busy = busy_ratio(w)
    decided, bounds = waits.decided, waits.bounds
    scheduler = SchedulerFigures(
        running=whole(w.now.gauges.running), waiting=whole(w.now.gauges.waiting),
        steps=_count(steps),
        busy_ratio=busy,
        busy_ratio_while_waiting=busy if busy is not None and waits.waiting_share == 1.0 else None,
        tokens_per_s=per_s(computed, w.span), decode_tokens_per_s=per_s(generated, w.span),
        requests_finished=_count(e2e),
        wait_p50_s=quantile(queue, 0.50), wait_p99_s=quantile(queue, 0.99),
        decided_wait_p99_s=None if decided is None else decided.value,
        decided_wait_p99_at_least_s=None if bounds is None else bounds.at_least,
        decided_wait_p99_at_most_s=None if bounds is None else bounds.at_most,
        decided_wait_estimate_s=None if bounds is None else bounds.estimate,
        head_of_line_share=infer(inferred, "window.scheduler.head_of_line_share",
                                 head_of_line_share(w.timelines, waits.step_period)),
        waiting_share=waits.waiting_share, wait_seconds_by_reason=waits.by_reason,
        step_time_mean_s=waits.step_period, no_step_for_s=no_step_for_s,
        **_outcomes(w))
    if busy is not None:
        inferred["window.scheduler.busy_ratio_while_waiting"] = (
            f"GPU execution {busy:.0%} of the window "
            f"(gpu_execution_seconds_total over {w.span:.1f} s"
            + (", requests waiting at every scrape)" if waits.waiting_share == 1.0 else ")"))
    return scheduler, inferred


def busy_ratio(w: ScrapeWindow) -> float | None:
    """SGLang's GPU execution seconds in the window over the window, per data-parallel rank."""
    executed = w.delta_total("gpu_execution")
    if executed is None or w.span <= 0:
        return None
    ranks = {s.labels.get("dp_rank") for s in values(w.family("gpu_execution"))} or {None}
    return min(1.0, executed / w.span / len(ranks))


def _tokens(w: ScrapeWindow, steps: HistogramDelta | None) -> tuple[float | None, float | None]:
    """The tokens the window's steps computed, and those decoded (SGLang's realtime tokens by mode
    where the iteration histogram or the generation counter is not published)."""
    generated = w.delta_total("generation_tokens")
    by_mode = _delta_by_label(w, "realtime_tokens", "mode")
    if generated is None and by_mode:
        generated = by_mode.get("decode")
    computed = None if steps is None else steps.sum
    if computed is None and by_mode:
        computed = by_mode.get("decode", 0.0) + by_mode.get("prefill_compute", 0.0)
    return computed, generated


def _delta_by_label(w: ScrapeWindow, figure: str, name: str) -> dict[str, float] | None:
    """A counter's increase over the window by the value of label `name`; a reset counts from
    zero."""
    a, b = by_label(w.family(figure), name), by_label(w.family_before(figure), name)
    if a is None or b is None:
        return None
    return {k: v - b.get(k, 0.0) if v >= b.get(k, 0.0) else v for k, v in a.items()}


# vLLM's finished_reason values: ended by the model or at the length limit; any other failed
ENDED_ON_ITS_OWN, CUT_AT_LENGTH = "stop", "length"


def _outcomes(w: ScrapeWindow) -> dict[str, float | None]:
    """How the window's requests finished (the share cut at their length limit, the share failed:
    aborted by their client or an error) and speculative decoding's acceptance in it."""
    ended = _delta_by_label(w, "finished", "finished_reason")
    total = sum(ended.values()) if ended else 0.0
    drafted, accepted = w.delta_total("spec_draft_tokens"), w.delta_total("spec_accepted_tokens")
    return {
        "cut_at_length_share": (ended or {}).get(CUT_AT_LENGTH, 0.0) / total if total else None,
        "failed_share": (total - (ended or {}).get(ENDED_ON_ITS_OWN, 0.0)
                         - (ended or {}).get(CUT_AT_LENGTH, 0.0)) / total if total else None,
        "spec_acceptance": (min(1.0, accepted / drafted)
                            if drafted and accepted is not None else None),
    }


def _count(h: HistogramDelta | None) -> int | None:
    return None if h is None else round(h.count)
