"""Serving figures of a replayed run, under the keys `lab --json` gives them, computed the same
way for what was measured and what is predicted so the two compare; and each stage's predicted
state from the signals a simulation can say (the thresholds are the diagnosis's own)."""

from __future__ import annotations

from collections.abc import Iterable

from stagelens.diagnosis.config import DiagnosisConfig
from stagelens.engine_hooks.records.stats import percentile
from stagelens.vocabulary import COLD_PATH, KV_CACHE, SCHEDULER

# the figures the error tables compare, in order
COMPARED = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "latency_p50_s",
            "latency_p99_s", "throughput_tokens_per_s")
# two predictions this close are the same schedule priced alike (a change that binds nowhere at this
# load): no choice between them
ALIKE = 0.01


def serving_figures(done: Iterable, window: tuple[float, float] | None = None) -> dict:
    """`done`: objects with arrival, first_token, finished, output count (`outputs` or
    `output_tokens`) and preemptions. Throughput counts the tokens made inside `window` (default:
    first to last arrival, while arrivals ran, as `lab` counts them), each request's tokens
    spread evenly from its first token to its end."""
    rows = [(r.arrival, r.first_token, r.finished, _outputs(r), r.preemptions) for r in done]
    ended = [row for row in rows if row[1] is not None and row[2] is not None]
    ttft = [f - a for a, f, _, _, _ in ended]
    latency = [e - a for a, _, e, _, _ in ended]
    tpot = [(e - f) / (n - 1) for _, f, e, n, _ in ended if n > 1]
    if window is None:
        arrivals = [row[0] for row in rows]
        window = (min(arrivals), max(arrivals)) if arrivals else (0.0, 0.0)
    lo, hi = window
    tokens = sum(_tokens_between(f, e, n, lo, hi) for _, f, e, n, _ in ended)
    return {
        "requests_finished": len(ended),
        "output_tokens": sum(n for *_, n, _ in ended),
        "throughput_tokens_per_s": tokens / (hi - lo) if hi > lo else None,
        "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
        "tpot_p50_s": percentile(tpot, 50), "tpot_p99_s": percentile(tpot, 99),
        "latency_p50_s": percentile(latency, 50), "latency_p99_s": percentile(latency, 99),
        "preemptions": sum(row[4] for row in rows),
    }


def _outputs(r) -> int:
    return r.outputs if hasattr(r, "outputs") else r.output_tokens


def _tokens_between(first: float, end: float, n: int, lo: float, hi: float) -> float:
    """Of `n` tokens, the first at `first` and the rest evenly until `end`: how many fall in [lo,
    hi]."""
    count = 1.0 if lo <= first <= hi else 0.0
    if n > 1 and end > first:
        overlap = max(0.0, min(end, hi) - max(first, lo))
        count += (n - 1) * overlap / (end - first)
    elif n > 1 and lo <= end <= hi:
        count += n - 1
    return count


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured


def alike(a: float | None, b: float | None) -> bool:
    """Two predicted figures the simulation cannot tell apart."""
    return a is not None and b is not None and abs(a - b) <= ALIKE * max(abs(a), abs(b))


def stage_states(signals: dict[str, float | None], config: DiagnosisConfig | None = None) -> dict[str, dict]:
    """Each stage's predicted state from the signals a simulation gives (those above a threshold
    are worse)."""
    config = config or DiagnosisConfig()
    stages = {KV_CACHE: ("kv_fragmentation_ratio",), SCHEDULER: ("scheduler_wait_p99",),
              COLD_PATH: ("requests_waiting_on_model",)}
    out = {}
    for stage, ids in stages.items():
        state, evidence = "ok", {}
        for signal_id in ids:
            value = signals.get(signal_id)
            evidence[signal_id] = value
            t = config.threshold(signal_id)
            if value is None:
                continue
            if t.firing is not None and value > t.firing:
                state = "firing"
            elif t.warn is not None and value > t.warn and state != "firing":
                state = "warn"
        out[stage] = {"state": state, "signals": evidence}
    return out
