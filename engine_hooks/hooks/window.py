"""Figures over the recent window, derived from the recorder's step records and timelines: the
snapshot's `Window` (engine_hooks.records.snapshot).

Every figure is None when the window holds no data for it: unknown is never reported as healthy.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from stagelens.engine_hooks.hooks.reference import reference_at
from stagelens.engine_hooks.records.attribution import tail
from stagelens.engine_hooks.records.snapshot import (
    ColdPathFigures,
    KvFigures,
    KvUsage,
    LoadInProgress,
    SchedulerFigures,
    Window,
    WindowTail,
)
from stagelens.engine_hooks.records.stats import percentile
from stagelens.engine_hooks.records.timeline import BEHIND_LONG_PREFILL, RequestTimeline


@dataclass
class WindowRecords:
    """What the recorder holds of the window: its steps, the requests that ended in it, the model
    loads."""
    steps: list[dict]
    finished: list[RequestTimeline]
    loads: list[dict]
    # (wait so far, of it decided) of requests
    in_flight: list[tuple[float, float]] = field(default_factory=list)
    # model -> start, of the loads running now
    loading: dict[str, float] = field(default_factory=dict)
    # the allocator's last full account
    usage: KvUsage | None = None


@dataclass(frozen=True)
class WindowSettings:
    """What the figures are judged with: the engine's shape and the recorder's settings."""
    block_size: int
    layers: int
    long_prefill_tokens: int      # a prefill larger than this blocks the short requests behind it
    lengths_sample: int = 256     # sequence lengths kept for block-size advice


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def kv_figures(steps: list[dict], usage: KvUsage | None, block_size: int, layers: int,
               reference: dict | None) -> KvFigures:
    reserved = sum(s["kv_slots_reserved"] for s in steps)
    cached = sum(s["kv_tokens_cached"] for s in steps)
    # free memory no request can use (contiguous extents too short), in slots, counted for every
    # step
    unusable_slots = (usage.unusable_free_blocks or 0) * block_size * len(steps) if usage else 0
    useful = sum(s["kv_useful_bytes"] for s in steps)
    moved = sum(s["kv_moved_bytes"] for s in steps)
    # Bandwidth is judged on decode steps: a prefill's attention is compute-bound by nature. Each
    # step is compared with the ideal layout read by as many decodes, as many bytes per call (one
    # call a layer).
    decode = [s for s in steps if s["attention_s"] > 0 and s["kv_moved_bytes"] and not s["prefill_tokens"]]
    decode_moved = sum(s["kv_moved_bytes"] for s in decode)
    decode_s = sum(s["attention_s"] for s in decode)
    ratios = []
    for s in decode:
        ref = reference_at(reference, s["decode_seqs"], s["kv_useful_bytes"] / layers)
        if ref:
            # useful bytes delivered per second
            ratios.append(s["kv_useful_bytes"] / s["attention_s"] / ref)
    swing = statistics.pstdev(ratios) / statistics.fmean(ratios) if len(ratios) >= 3 else None
    sequences = sum(s["kv_sequences"] for s in steps)
    return KvFigures(
        fragmentation_ratio=_ratio(reserved - cached + unusable_slots, reserved + unusable_slots),
        slots_reserved_mean=_ratio(reserved, len(steps)),
        tokens_cached_mean=_ratio(cached, len(steps)),
        access_efficiency=_ratio(useful, moved),
        read_bandwidth_bytes_per_s=_ratio(decode_moved, decode_s),
        effective_bandwidth_ratio=_mean(ratios),
        bandwidth_swing_cv=swing,
        gathered_share=_ratio(sum(s["kv_gathered_bytes"] for s in steps), moved),
        block_runs_per_sequence=_ratio(sum(s["kv_block_runs"] for s in steps), sequences),
        attention_share_of_step=_ratio(sum(s["attention_s"] for s in steps),
                                       sum(s["end"] - s["start"] for s in steps)),
    )


def scheduler_figures(steps: list[dict], finished: list[RequestTimeline], in_flight: list[tuple[float, float]],
                      span: float, long_prefill_tokens: int) -> SchedulerFigures:
    waits = [t.scheduler_wait_s for t in finished] + [w for w, _ in in_flight]
    decided = [t.decided_wait_s for t in finished] + [d for _, d in in_flight]
    waiting_steps = [s for s in steps if s["waiting"] > 0]
    short = [t for t in finished if t.prompt_tokens <= long_prefill_tokens]
    short_wait = sum(t.scheduler_wait_s for t in short)
    behind = sum(t.wait_by_reason().get(BEHIND_LONG_PREFILL, 0.0) for t in short)
    by_reason: dict[str, float] = {}
    for t in finished:
        for reason, seconds in t.wait_by_reason().items():
            by_reason[reason] = by_reason.get(reason, 0.0) + seconds
    busy = sum(s["end"] - s["start"] for s in steps)
    last = steps[-1] if steps else None
    return SchedulerFigures(
        steps=len(steps),
        busy_ratio=_ratio(busy, span) if steps or span else None,
        busy_ratio_while_waiting=_ratio(sum(s["end"] - s["start"] for s in waiting_steps),
                                        sum(s["end"] - s["start"] + s["idle_before_s"] for s in waiting_steps)),
        waiting_share=_ratio(len(waiting_steps), len(steps)),
        budget_use_while_waiting=_mean([s["tokens"] / s["token_budget"] for s in waiting_steps]),
        wait_p50_s=percentile(waits, 50),
        wait_p99_s=percentile(waits, 99),
        decided_wait_p50_s=percentile(decided, 50),
        decided_wait_p99_s=percentile(decided, 99),
        requests_finished=len(finished),
        head_of_line_share=_ratio(behind, short_wait),
        wait_seconds_by_reason=by_reason,
        waiting=last["waiting"] if last else 0,
        running=last["running"] if last else 0,
        tokens_per_s=_ratio(sum(s["tokens"] for s in steps), span),
        decode_tokens_per_s=_ratio(sum(s["decode_tokens"] for s in steps), span),
        step_time_mean_s=_mean([s["end"] - s["start"] for s in steps]),
    )


def cold_path_figures(steps: list[dict], loads: list[dict], loading: dict[str, float], now: float,
                      window_start: float, span: float) -> ColdPathFigures:
    decode_only = [s for s in steps if s["decode_tokens"] and not s["prefill_tokens"]]
    during = _mean([s["end"] - s["start"] for s in decode_only if s["loading"]])
    without = _mean([s["end"] - s["start"] for s in decode_only if not s["loading"]])
    recent = [ld for ld in loads if ld["end"] > window_start]
    return ColdPathFigures(
        loads_in_progress=[LoadInProgress(model=m, since=start, seconds=now - start) for m, start in loading.items()],
        loads_in_window=len(recent),
        load_seconds_in_window=sum(ld["seconds"] for ld in recent),
        load_bytes_in_window=sum(ld["bytes"] for ld in recent),
        step_time_during_load_s=during,
        step_time_without_load_s=without,
        step_time_inflation=_ratio(during, without) if during is not None else None,
        waiting_on_model=steps[-1]["waiting_on_model"] if steps else 0,
        h2d_bytes_per_s=_ratio(sum(s["h2d_bytes"] for s in steps), span),
    )


def window_stats(records: WindowRecords, settings: WindowSettings, *, reference: dict | None,
                 now: float, span: float) -> Window:
    """The window's figures: `span` seconds up to `now`, against the ideal-layout `reference` (or
    None)."""
    r, c = records, settings
    kv = kv_figures(r.steps, r.usage, c.block_size, c.layers, reference)
    kv.sequence_lengths = [t.prompt_tokens + t.output_tokens for t in r.finished[-c.lengths_sample:]]
    return Window(
        span_s=span,
        kv=kv,
        scheduler=scheduler_figures(r.steps, r.finished, r.in_flight, span, c.long_prefill_tokens),
        cold_path=cold_path_figures(r.steps, r.loads, r.loading, now, now - span, span),
        tail=WindowTail(ttft=tail(r.finished, "ttft"), latency=tail(r.finished, "latency")),
    )
