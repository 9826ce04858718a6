"""What `--search` found, as JSON and as text: the best configurations meeting the SLO and the Pareto front."""

from __future__ import annotations

from agent.lab.fixes import as_flags
from agent.whatif.search import SearchResult
from agent.whatif.settings import as_set_flags

SHOWN = 5


def search_dict(result: SearchResult) -> dict:
    def row(change, p):
        return {"set": as_set_flags(change), "predicted": p.to_dict()}

    return {"slo": result.slo, "evaluated": len(result.evaluated),
            "meeting": [row(c, p) for c, p in result.meeting()],
            "pareto": [row(c, p) for c, p in result.pareto()]}


def render_search(result: SearchResult) -> str:
    def line(change, p) -> str:
        f = p.figures
        ttft, tpot = f["ttft_p99_s"], f["tpot_p99_s"]
        return (f"  {f['throughput_tokens_per_s'] or 0:8.1f} tok/s  TTFT p99 "
                f"{'-' if ttft is None else f'{ttft * 1000:.0f} ms':>8}  TPOT p99 "
                f"{'-' if tpot is None else f'{tpot * 1000:.0f} ms':>7}  {as_flags(change) if change else '(today)'}")

    slo = ", ".join(f"{k} <= {v:g} s" for k, v in result.slo.items()) or "none given"
    meeting = result.meeting()
    lines = [f"searched {len(result.evaluated)} configurations; SLO: {slo}",
             f"meeting the SLO: {len(meeting)}" + (", the best throughput first:" if meeting else "")]
    lines += [line(c, p) for c, p in meeting[:SHOWN]]
    lines += ["Pareto front (P99 TTFT against throughput):"] + [line(c, p) for c, p in result.pareto()]
    return "\n".join(lines)
