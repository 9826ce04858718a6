"""`report.md`: the curve as the report's table, then the knee and the stage that fires past it."""

from __future__ import annotations

from stagelens.loadtest.results import Results
from stagelens.loadtest.variables import label

_TITLES = {"steady": "steady state", "stress": "stress to the first knee", "sweep": "sweep"}


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _pct(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio * 100:.0f}%"


def _stage(point) -> str:
    if point.firing_stages:
        others = [s for s in point.firing_stages if s != point.stage]
        return f"{point.stage}" + (f" (+{', '.join(others)})" if others else "")
    if point.warn_stages:
        return f"none (warn: {', '.join(point.warn_stages)})"
    return point.stage


def table(results: Results) -> str:
    name = results.flag[2:]
    rows = [f"| {name} | throughput tokens/s | P50 | P99 | P99 TTFT | engine busy | requests | firing stage |",
            "|---|---:|---:|---:|---:|---:|---:|---|"]
    knee = results.knee
    for i, p in enumerate(results.points):
        mark = " (knee)" if knee and knee.index == i else " (past the knee)" if knee and knee.past_index == i else ""
        rows.append(f"| {label(p.value)}{mark} | {p.throughput_tokens_per_s:.0f} | "
                    f"{_ms(p.latency_p50_s)} | {_ms(p.latency_p99_s)} | {_ms(p.ttft_p99_s)} | "
                    f"{_pct(p.engine_busy_ratio)} | {p.requests} | {_stage(p)} |")
    return "\n".join(rows)


def knee_line(results: Results) -> str:
    knee, points, name = results.knee, results.points, results.flag[2:]
    if results.mode == "steady":
        p = points[0]
        why = p.explanations.get(p.stage)
        return (f"steady at {name}={label(p.value)}: {p.throughput_tokens_per_s:.0f} tokens/s, P99 "
                f"{_ms(p.latency_p99_s)}; "
                f"stage: {_stage(p)}" + (f". {p.stage}: {why.rstrip('.')}" if why else ""))
    if knee is None:
        return f"no knee over {name}={label(points[0].value)}..{label(points[-1].value)}"
    past = points[knee.past_index]
    where = f"{name}={label(points[knee.index].value)}" if knee.index is not None else "the first point"
    fires = (f"past it {past.stage} fires" if past.firing_stages
             else "past it no stage fires" if past.verdict != "unknown" else "past it the stage is unknown")
    if past.firing_stages and past.root_stage and past.root_stage != past.stage:
        fires += f" (root stage {past.root_stage})"
    line = f"knee at {where}: {knee.reason}; {fires} (at {name}={label(past.value)})"
    why = past.explanations.get(past.stage)
    return line + (f". {past.stage}: {why.rstrip('.')}" if why else "")


def render_report(results: Results) -> str:
    cfg = results.config
    settings = ", ".join(f"{k}={v}" for k, v in cfg.items() if v is not None)
    return "\n".join([
        f"# stagelens bench {results.mode}: {_TITLES.get(results.mode, results.mode)} over {results.flag}",
        "",
        f"Target: {results.target}. Settings: {settings}.",
        "",
        table(results),
        "",
        knee_line(results) + ".",
        "",
        "P50/P99: request latency (arrival to last token) over the requests that arrived in the "
        "recorded window, warm-up left out; TTFT client-side for a URL. Engine busy: share of the "
        "window the engine spent in steps (compute utilisation). Firing stage: the diagnosis at "
        "the end of the point.",
        "",
    ])
