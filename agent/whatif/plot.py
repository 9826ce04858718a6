"""`--plot FILE.png`: every configuration `--search` predicted, P99 TTFT against throughput, the Pareto front
joined, those meeting the SLO marked and today's circled. matplotlib is imported here only (Agg backend)."""

from __future__ import annotations

from agent.lab.fixes import as_flags
from agent.whatif.search import SearchResult


def plot(result: SearchResult, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def xy(points):
        return ([p.figures["throughput_tokens_per_s"] or 0 for _, p in points],
                [(p.figures["ttft_p99_s"] or 0) * 1000 for _, p in points])

    meeting = {id(p) for _, p in result.meeting()}
    fig, ax = plt.subplots(figsize=(7, 5), dpi=110)
    others = [(c, p) for c, p in result.evaluated if id(p) not in meeting]
    ax.scatter(*xy(others), s=18, color="#999999", label="configuration")
    ax.scatter(*xy(result.meeting()), s=24, color="#2ca02c", label="meets the SLO")
    front = result.pareto()
    ax.plot(*xy(front), color="#1f77b4", linewidth=1.2, label="Pareto front")
    today = [(c, p) for c, p in result.evaluated if not c]
    ax.scatter(*xy(today), s=80, facecolors="none", edgecolors="#d62728", label="today")
    best = result.meeting()[:1]
    if best:
        x, y = xy(best)
        ax.annotate(as_flags(best[0][0]) or "today", (x[0], y[0]), fontsize=7, xytext=(5, 5),
                    textcoords="offset points")
    ax.set_xlabel("throughput (tokens/s, predicted)")
    ax.set_ylabel("P99 TTFT (ms, predicted)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
