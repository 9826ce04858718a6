"""`--plot FILE.png`: every configuration `--search` predicted, P99 TTFT against throughput, the
Pareto front joined, those meeting the SLO marked and today's circled. matplotlib is imported here
only (Agg backend).

The image is drawn in memory and written to the path as named, with the write's own error:
matplotlib's own savefig added `.png` to a name without a suffix and left a failed write of a
full disk unsaid."""

from __future__ import annotations

import io
from pathlib import Path

from stagelens.errors import UserError
from stagelens.lab.fixes import as_flags
from stagelens.whatif.search import SearchResult


def plot_format(path: str) -> str:
    """The image format the path's suffix names (png without one); UserError, before any work,
    for a suffix matplotlib cannot write or for no matplotlib (it is the `bench` extra's, not the
    agent's)."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise UserError("--plot: matplotlib is not installed (pip install 'stagelens[bench]')") from None
    suffix = Path(path).suffix.removeprefix(".").lower() or "png"
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix not in formats:
        raise UserError(f"--plot {path}: cannot draw a .{suffix[:20]} image (use one of {', '.join(sorted(formats))})")
    return suffix


def plot(result: SearchResult, path: str, image_format: str) -> None:
    """The search's plot written to `path`; OSError when it cannot be."""
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
    image = io.BytesIO()
    fig.savefig(image, format=image_format)
    plt.close(fig)
    Path(path).write_bytes(image.getvalue())
