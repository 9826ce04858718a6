"""What `--search` found, as JSON and as text: the best configurations meeting the SLO and the
Pareto front."""

from __future__ import annotations

from stagelens.lab.fixes import as_flags
from stagelens.whatif.search import BatchSweep, SearchResult
from stagelens.whatif.settings import as_set_flags

SHOWN = 5


def search_dict(result: SearchResult) -> dict:
    def row(change, p):
        return {"set": as_set_flags(change), "predicted": p.to_dict()}

    return {"slo": result.slo, "evaluated": len(result.evaluated),
            "meeting": [row(c, p) for c, p in result.meeting()],
            "pareto": [row(c, p) for c, p in result.pareto()],
            "max_num_seqs_sweep": _sweep_dict(result.sweep)}


def _sweep_dict(sweep: BatchSweep | None) -> dict | None:
    if sweep is None:
        return None
    return {"points": [{"max_num_seqs": n, "ttft_p99_s": p.figures["ttft_p99_s"],
                        "latency_p99_s": p.figures["latency_p99_s"],
                        "preemptions": p.figures.get("preemptions"),
                        "throughput_tokens_per_s": p.figures["throughput_tokens_per_s"],
                        "extrapolated": p.extrapolated} for n, p in sweep.points],
            "largest_meeting_slo": sweep.largest_meeting(), "kv_wall_at": sweep.wall()}


def render_search(result: SearchResult) -> str:
    def line(change, p) -> str:
        f = p.figures
        ttft, tpot = f["ttft_p99_s"], f["tpot_p99_s"]
        return (f"  {f['throughput_tokens_per_s'] or 0:8.1f} tok/s  TTFT p99 "
                f"{'-' if ttft is None else f'{ttft * 1000:.0f} ms':>8}  TPOT p99 "
                f"{'-' if tpot is None else f'{tpot * 1000:.0f} ms':>7}  "
                f"{as_flags(change) if change else '(today)'}")

    slo = ", ".join(f"{k} <= {v:g} s" for k, v in result.slo.items()) or "none given"
    meeting = result.meeting()
    lines = [f"searched {len(result.evaluated)} configurations; SLO: {slo}",
             f"meeting the SLO: {len(meeting)}" + (", the best throughput first:" if meeting else "")]
    lines += [line(c, p) for c, p in meeting[:SHOWN]]
    lines += ["Pareto front (P99 TTFT against throughput):"] + [line(c, p) for c, p in result.pareto()]
    if result.sweep is not None:
        lines += _sweep_lines(result.sweep, slo)
    return "\n".join(lines)


def _sweep_lines(sweep: BatchSweep, slo: str) -> list[str]:
    wall = sweep.wall()
    lines = ["max-num-seqs swept, the rest as today:"]
    for n, p in sweep.points:
        f = p.figures
        ttft = f["ttft_p99_s"]
        mark = "  <- the KV cache runs out: requests preempted and recomputed" if n == wall else ""
        lines.append(f"  {n:>5}  TTFT p99 {'-' if ttft is None else f'{ttft * 1000:.0f} ms':>9}  "
                     f"{f.get('preemptions') or 0:>5} preemptions  "
                     f"{f['throughput_tokens_per_s'] or 0:8.1f} tok/s"
                     + mark)
    largest = sweep.largest_meeting()
    lines.append(f"the largest max-num-seqs meeting the SLO ({slo}): "
                 + (str(largest) if largest is not None else "none of those swept"))
    return lines
