"""What-if's speed: ten minutes of traffic at 50 requests/s simulated (target <= 2 s on one core), `--search`
over 50 configurations (target <= 60 s), 30,000 overloaded requests under every policy (seconds each: the
waiting queue under a queue that only grows), and a 10-minute recording of an engine read from outside, its
spans only, replayed (target <= 10 s: read, fitted on its spans, today's run predicted).

    python bench/whatif_speed.py [--minutes 10] [--rate 50] [--overloaded 30000] [--only CASE,...] [--json]

CASE: simulate, search, overloaded, spans. The workload is synthetic and seeded (lognormal prompts around 160
tokens, outputs of 16-64, 5% long prompts of 1,536), the step cost one fitted on a CPU run of the `small` model's
order; the overloaded requests are the same draws arriving ten times as fast (500 a second); the spans are
those the simulator gives the 10-minute workload under that cost, written as a bundle of timelines alone.
Figures in CPU seconds, never pass/fail.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _report import emit  # noqa: E402

from stagelens.bundle import BUNDLE_FORMAT  # noqa: E402
from stagelens.engine_hooks.records.timeline import PrefillChunk, RequestTimeline  # noqa: E402
from stagelens.lab.bundled_engine import POLICIES  # noqa: E402
from stagelens.whatif.fit import StepCost  # noqa: E402
from stagelens.whatif.predict import predict  # noqa: E402
from stagelens.whatif.predict_all import what_if  # noqa: E402
from stagelens.whatif.search import search  # noqa: E402
from stagelens.whatif.settings import Settings  # noqa: E402
from stagelens.whatif.workload import ServedRequest, from_bundle, scaled  # noqa: E402

CASES = ("simulate", "search", "overloaded", "spans")

SETTINGS = Settings(block_size=16, max_num_seqs=64, max_num_batched_tokens=2048, enable_chunked_prefill=True,
                    long_prefill_token_threshold=0, policy="fcfs", allocator="paged", max_model_len=4096,
                    kv_cache_memory=2 * 2**30, kv_bytes_per_token=131072, models=1, num_preload_models=1,
                    max_resident_models=None, model="medium")
# a GPU-like step: 8 ms fixed, 2 ms per 1000 prefill tokens: enough to serve 50 requests/s
COST = StepCost({"fixed": 0.008, "prefill_tokens": 2e-6, "cold_prefill_tokens": 5e-7, "prefill_pairs": 1e-10,
                 "decode_seqs": 5e-5, "kv_tokens": 1e-8, "extra_forwards": 0.002, "loading": 0.0},
                steps=1000, error_median=0.05, error_p90=0.1, total_error=0.0,
                observed_max={"prefill_tokens": 4096, "prefill_pairs": 1e7, "decode_seqs": 256, "kv_tokens": 1e6},
                cold_after_s=0.5)


def workload(minutes: float, rate: float, seed: int = 0) -> list[ServedRequest]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(int(minutes * 60 * rate)):
        t += rng.expovariate(rate)
        prompt = 1536 if rng.random() < 0.05 else max(1, min(3000, round(rng.lognormvariate(5.07, 0.6))))
        out.append(ServedRequest(f"r{i}", "model-0", t, prompt, rng.randint(16, 64)))
    return out


def timed(work) -> tuple[float, object]:
    started = time.process_time()
    result = work()
    return time.process_time() - started, result


def simulated(requests: list[ServedRequest]) -> dict:
    one, p = timed(lambda: predict(SETTINGS, COST, requests))
    return {"requests": len(requests), "simulated_steps": p.simulation.log.steps,
            "simulate_cpu_s": one, "simulate_target_s": 2.0, "simulate_ratio_to_target": one / 2.0,
            "predicted_ttft_p99_s": p.figures["ttft_p99_s"], "predicted_throughput_tokens_per_s":
            p.figures["throughput_tokens_per_s"]}


def searched(requests: list[ServedRequest], configs: int) -> dict:
    seconds, result = timed(lambda: search(SETTINGS, COST, requests, limit=configs))
    return {"search_configurations": len(result.evaluated), "search_requests_each": len(requests),
            "search_cpu_s": seconds, "search_target_s": 60.0, "search_ratio_to_target": seconds / 60.0}


def overloaded(count: int, rate: float) -> dict:
    """`count` requests arriving ten times as fast as `rate`, which the engine serves: the queue only grows."""
    requests = scaled(workload(count / rate / 60, rate), 10.0)
    out: dict = {"overloaded_requests": len(requests), "overloaded_rate_per_s": 10 * rate}
    for policy in POLICIES:
        seconds, p = timed(lambda policy=policy: predict(SETTINGS.changed({"policy": policy}), COST, requests))
        out[f"overloaded_{policy}_cpu_s"] = seconds
        out[f"overloaded_{policy}_unfinished"] = p.figures["requests_unfinished"]
        out[f"overloaded_{policy}_ttft_p99_s"] = p.figures["ttft_p99_s"]
    return out


def spans_replay(minutes: float, rate: float) -> dict:
    """The workload's spans as an engine read from outside gives them (arrival, prefill interval, first token,
    end), in a bundle of timelines alone, replayed as `whatif --replay` does: read, fitted, predicted."""
    requests = workload(minutes, rate)
    run = predict(SETTINGS, COST, requests).simulation
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(json.dumps({"format": BUNDLE_FORMAT, "created_unix": time.time(), "source": "spans"}) + "\n")
        for r in run.requests:
            timeline = RequestTimeline(r.rid, "served-model", r.prompt, r.outputs, r.arrival, r.finished,
                                       first_token=r.first_token, chunks=[PrefillChunk(r.scheduled, r.first_token,
                                                                                       0, 0)])
            f.write(json.dumps({"kind": "timeline", "timeline": timeline.to_dict()}) + "\n")
    path = Path(f.name)
    try:
        seconds, result = timed(lambda: what_if(from_bundle(str(path)), []))
        size = path.stat().st_size
    finally:
        path.unlink()
    return {"spans_requests": len(run.requests), "spans_bundle_mib": size / 2**20, "spans_replay_cpu_s": seconds,
            "spans_replay_target_s": 10.0, "spans_replay_ratio_to_target": seconds / 10.0,
            "spans_fit_median_error": result.cost.error_median}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--configs", type=int, default=50)
    parser.add_argument("--overloaded", type=int, default=30_000, help="requests in the overloaded case")
    parser.add_argument("--only", default=",".join(CASES), help=f"cases to run, of {', '.join(CASES)}")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = set(args.only.split(","))
    if cases - set(CASES):
        parser.error(f"--only: {', '.join(sorted(cases - set(CASES)))} not among {', '.join(CASES)}")
    figures: dict = {}
    if "simulate" in cases:
        figures |= simulated(workload(args.minutes, args.rate))
    if "search" in cases:
        figures |= searched(workload(args.minutes, args.rate), args.configs)
    if "overloaded" in cases:
        figures |= overloaded(args.overloaded, args.rate)
    if "spans" in cases:
        figures |= spans_replay(args.minutes, args.rate)
    emit(figures, args.json)


if __name__ == "__main__":
    main()
