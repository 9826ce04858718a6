"""`--search`: the flags swept within sane bounds around today's, each configuration predicted on
the same replayed workload; those meeting an SLO (`ttft_p99=0.5,tpot_p99=0.05`) ranked by
throughput, and the Pareto front of P99 TTFT against throughput."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from stagelens.errors import UserError
from stagelens.numbers import number_of_text
from stagelens.whatif.fit import StepCost
from stagelens.whatif.predict import Prediction, predict
from stagelens.whatif.settings import Settings
from stagelens.whatif.workload import ServedRequest

SLO_FIGURES = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "latency_p50", "latency_p99")
SEARCH_LIMIT = 50
BUDGETS = (256, 512, 1024, 2048, 4096, 8192)
POLICIES = ("fcfs", "short-first", "length-bucket")


@dataclass
class SearchResult:
    evaluated: list[tuple[dict, Prediction]] = field(default_factory=list)
    slo: dict[str, float] = field(default_factory=dict)
    sweep: BatchSweep | None = None

    def meeting(self) -> list[tuple[dict, Prediction]]:
        """Configurations meeting the SLO, the best throughput first."""
        ok = [(c, p) for c, p in self.evaluated if meets(p, self.slo)]
        return sorted(ok, key=lambda cp: -(cp[1].figures["throughput_tokens_per_s"] or 0))

    def pareto(self) -> list[tuple[dict, Prediction]]:
        """No other configuration has both a lower P99 TTFT and a higher throughput; by P99 TTFT."""
        points = sorted(((c, p) for c, p in self.evaluated if p.figures["ttft_p99_s"] is not None),
                        key=lambda cp: (cp[1].figures["ttft_p99_s"],
                                        -(cp[1].figures["throughput_tokens_per_s"] or 0)))
        front, best = [], -1.0
        for c, p in points:
            throughput = p.figures["throughput_tokens_per_s"] or 0.0
            if throughput > best:
                front.append((c, p))
                best = throughput
        return front


def parse_slo(texts: Iterable[str] = ()) -> dict[str, float]:
    """'ttft_p99=0.5,tpot_p99=0.05' (and more such texts) -> {'ttft_p99': 0.5, 'tpot_p99': 0.05}
    (seconds); UserError on a figure it does not know, one given twice (which bound was meant?)
    or a value that is not a positive number of seconds written in ASCII."""
    out: dict[str, float] = {}
    for part in (part for text in texts for part in text.split(",")):
        if not part.strip():
            continue
        key, sep, raw = part.partition("=")
        key = key.strip()
        if key not in SLO_FIGURES or not sep:
            raise UserError(f"--slo {part.strip()[:40]!r}: expected FIGURE=SECONDS with FIGURE one "
                            f"of {', '.join(SLO_FIGURES)}")
        if key in out:
            raise UserError(f"--slo {key}: given twice: give each figure once")
        value = number_of_text(raw)
        if value is None or not 0 < value < 1e6:
            raise UserError(f"--slo {key}: {raw.strip()[:40]!r} is not a positive number of seconds")
        out[key] = value
    return out


def candidates(today: Settings, limit: int = SEARCH_LIMIT, seed: int = 0) -> list[dict]:
    """Up to `limit` changes to today's settings the engine would take: batch size, token budget,
    chunking and the policy, around today's values; every one-flag change first, then
    combinations (seeded)."""
    seqs = sorted({max(1, today.max_num_seqs // 2), today.max_num_seqs,
                   min(1024, today.max_num_seqs * 2), min(1024, today.max_num_seqs * 4)})
    budgets = sorted({b for b in (*BUDGETS, today.max_num_batched_tokens) if b >= today.block_size})
    axes = {"max_num_seqs": seqs, "max_num_batched_tokens": budgets,
            "enable_chunked_prefill": [True, False], "policy": list(POLICIES)}
    current = {k: getattr(today, k) for k in axes}
    combos = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]
    changes = [{k: v for k, v in c.items() if v != current[k]} for c in combos]
    changes = [c for c in changes if c and _valid(today, c)]
    single = [c for c in changes if len(c) == 1]
    rest = [c for c in changes if len(c) > 1]
    random.Random(seed).shuffle(rest)
    return (single + rest)[:limit]


def _valid(today: Settings, change: dict) -> bool:
    try:
        today.changed(change)
    except UserError:
        return False
    return True


def meets(p: Prediction, slo: dict[str, float]) -> bool:
    return (all((p.figures.get(f"{k}_s") or 0) <= v for k, v in slo.items())
            and p.figures["requests_unfinished"] == 0)


@dataclass
class BatchSweep:
    """max-num-seqs from a quarter of today's up to the engine's bound, doubling: where raising
    the batch stops paying, and where the KV cache runs out (requests preempted and recomputed:
    the wall P99 explodes at)."""
    points: list[tuple[int, Prediction]]
    slo: dict[str, float]

    def largest_meeting(self) -> int | None:
        """The largest batch whose prediction meets the SLO (every request finished with none
        given)."""
        ok = [n for n, p in self.points if meets(p, self.slo)]
        return max(ok) if ok else None

    def wall(self) -> int | None:
        """The smallest batch at which requests are preempted for KV blocks, where a smaller one
        preempted none."""
        for (_, before), (n, p) in zip(self.points, self.points[1:], strict=False):
            if not before.figures.get("preemptions") and p.figures.get("preemptions"):
                return n
        return None


def sweep_sizes(today: Settings) -> list[int]:
    """max-num-seqs from a quarter of today's, doubling, to the engine's bound, today's among
    them."""
    sizes = {n for n in (2 ** k for k in range(11)) if today.max_num_seqs // 4 <= n} | {today.max_num_seqs}
    return sorted(n for n in sizes if _valid(today, {"max_num_seqs": n}))


def search(today: Settings, cost: StepCost, requests: list[ServedRequest],
           slo: dict[str, float] | None = None, limit: int = SEARCH_LIMIT) -> SearchResult:
    """Today, the batch sweep, then the other candidates: `limit` configurations predicted in
    all."""
    result = SearchResult(slo=slo or {})
    result.evaluated.append(({}, predict(today, cost, requests)))
    sweep = [{"max_num_seqs": n} for n in sweep_sizes(today) if n != today.max_num_seqs]
    rest = [c for c in candidates(today, limit) if c not in sweep]
    for change in (sweep + rest)[:limit - 1]:
        result.evaluated.append((change, predict(today.changed(change), cost, requests)))
    batches = {c.get("max_num_seqs", today.max_num_seqs): p for c, p in result.evaluated
               if set(c) <= {"max_num_seqs"}}
    result.sweep = BatchSweep(sorted(batches.items()), slo or {})
    return result
