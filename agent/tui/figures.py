"""The serving figures the TUI shows and compares before and after a fix, read from one frame's window
and the requests that finished in it."""

from __future__ import annotations

from stagelens.engine_hooks.records.stats import latency_summary
from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.frame import Frame

# (label, key, format, lower is better)
COMPARED = (
    ("requests finished", "finished", "count", False),
    ("TTFT p50", "ttft_p50_s", "seconds", True),
    ("latency p99", "latency_p99_s", "seconds", True),
    ("scheduler wait p99", "wait_p99_s", "seconds", True),
    ("head-of-line share", "hol_share", "ratio", True),
    ("KV fragmentation", "kv_fragmentation", "ratio", True),
    ("step-time inflation", "step_time_inflation", "ratio", True),
    ("busy while waiting", "busy_while_waiting", "pct", False),
    ("decode tokens/s", "decode_tokens_per_s", "rate", False),
)


def frame_figures(frame: Frame | None, timelines: list[RequestTimeline] = ()) -> dict:
    """Figures of `frame`'s window; TTFT and latency over `timelines` that finished inside it."""
    if frame is None or frame.window is None:
        return {}
    w = frame.window
    kv, sched, cold = w.kv, w.scheduler, w.cold_path
    span = w.span_s or 10.0
    recent = _finished_within(timelines, frame.time_monotonic - span, frame.time_monotonic)
    return {
        "waiting": sched.waiting, "running": sched.running,
        "wait_p50_s": sched.decided_wait_p50_s, "wait_p99_s": sched.decided_wait_p99_s,
        "busy_ratio": sched.busy_ratio, "busy_while_waiting": sched.busy_ratio_while_waiting,
        "budget_use": sched.budget_use_while_waiting, "hol_share": sched.head_of_line_share,
        "kv_fragmentation": kv.fragmentation_ratio, "kv_access_efficiency": kv.access_efficiency,
        "bandwidth_ratio": kv.effective_bandwidth_ratio,
        "step_time_inflation": cold.step_time_inflation,
        "decode_tokens_per_s": sched.decode_tokens_per_s,
        **_shown_latencies(recent),
        "finished": len(recent),
    }


def period_figures(frames: list[Frame], timelines: list[RequestTimeline] = ()) -> dict:
    """Figures of a period (before or after a fix): each window figure as last known in it, TTFT and
    latency over every request that finished in it."""
    if not frames:
        return {}
    out = frame_figures(frames[-1])
    for frame in reversed(frames[:-1]):
        missing = [k for k, v in out.items() if v is None]
        if not missing:
            break
        older = frame_figures(frame)
        for key in missing:
            out[key] = older.get(key)
    start, end = frames[0].time_monotonic, frames[-1].time_monotonic
    done = _finished_within(timelines, start, end)
    out.update(_shown_latencies(done))
    out["finished"] = len(done)
    return out


def _finished_within(timelines: list[RequestTimeline], start: float, end: float) -> list[RequestTimeline]:
    return [t for t in timelines if t.finished is not None and start <= t.finished <= end]


def _shown_latencies(timelines: list[RequestTimeline]) -> dict:
    """The two the TUI compares, TTFT p50 and latency p99, from the summary every surface uses."""
    summary = latency_summary(ttft=[t.ttft_s for t in timelines if t.ttft_s is not None],
                              latency=[t.latency_s for t in timelines if t.latency_s is not None])
    return {"ttft_p50_s": summary["ttft_p50_s"], "latency_p99_s": summary["latency_p99_s"]}
