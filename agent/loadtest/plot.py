"""`curve.png`: throughput and P99 against the varied setting, each point coloured by the stage
that fired there, the knee marked. matplotlib is imported here only, with the Agg backend (no
display needed)."""

from __future__ import annotations

import math
from pathlib import Path

from stagelens.loadtest.results import Results
from stagelens.loadtest.variables import label

COLOURS = {"kv_cache": "#d62728", "scheduler": "#ff7f0e", "cold_path": "#9467bd", "none": "#2ca02c",
           "unknown": "#7f7f7f"}
NAMES = {"kv_cache": "kv_cache firing", "scheduler": "scheduler firing",
         "cold_path": "cold_path firing", "none": "no stage firing", "unknown": "no diagnosis"}


def _positions(values: list) -> tuple[list[float], bool]:
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in values)
    if numeric and len(values) > 1:
        return [float(v) for v in values], max(values) / min(values) >= 8
    return [float(i) for i in range(len(values))], False


def plot(results: Results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points, knee = results.points, results.knee
    xs, log = _positions([p.value for p in points])
    metric = results.rule.get("metric", "latency")
    p99 = [(p.ttft_p99_s if metric == "ttft" else p.latency_p99_s) for p in points]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(7, 6), dpi=110)
    top.plot(xs, [p.throughput_tokens_per_s for p in points], color="#444444", linewidth=1.2,
             zorder=1)
    bottom.plot(xs, [math.nan if v is None else v * 1000 for v in p99], color="#444444",
                linewidth=1.2, zorder=1)
    seen = set()
    for x, p, y in zip(xs, points, p99, strict=True):
        stage = p.stage if p.stage in COLOURS else "unknown"
        kwargs = {"color": COLOURS[stage], "s": 60, "zorder": 3, "edgecolors": "black",
                  "linewidths": 0.5}
        top.scatter([x], [p.throughput_tokens_per_s], label=None if stage in seen else NAMES[stage],
                    **kwargs)
        if y is not None:
            bottom.scatter([x], [y * 1000], **kwargs)
        seen.add(stage)
    if knee is not None:
        kx = xs[knee.index] if knee.index is not None else xs[knee.past_index]
        for ax in (top, bottom):
            ax.axvline(kx, color="#1f77b4", linestyle="--", linewidth=1, zorder=0,
                       label="knee" if ax is top else None)
        top.annotate("knee", (kx, top.get_ylim()[1]), textcoords="offset points", xytext=(4, -12),
                     color="#1f77b4")
    if results.rule.get("p99_sla"):
        bottom.axhline(results.rule["p99_sla"] * 1000, color="#d62728", linestyle=":", linewidth=1,
                       label="P99 SLA")
        bottom.legend(loc="upper left", fontsize=8)
    top.set_ylabel("throughput (tokens/s)")
    bottom.set_ylabel(f"P99 {'TTFT' if metric == 'ttft' else 'latency'} (ms)")
    bottom.set_xlabel(results.flag)
    if log:
        bottom.set_xscale("log", base=2)
    bottom.set_xticks(xs)
    bottom.set_xticklabels([label(p.value) for p in points])
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    top.legend(loc="best", fontsize=8)
    top.set_title(f"stagelens bench {results.mode}: {results.flag} — {results.target}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
