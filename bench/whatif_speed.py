"""What-if's speed: ten minutes of traffic at 50 requests/s simulated (target <= 2 s on one core), and
`--search` over 50 configurations (target <= 60 s).

    python bench/whatif_speed.py [--minutes 10] [--rate 50] [--json]

The workload is synthetic and seeded (lognormal prompts around 160 tokens, outputs of 16-64, 5% long prompts of
1,536), the step cost one fitted on a CPU run of the `small` model's order; figures, never pass/fail.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _report import emit  # noqa: E402

from agent.whatif.fit import StepCost  # noqa: E402
from agent.whatif.predict import predict  # noqa: E402
from agent.whatif.search import search  # noqa: E402
from agent.whatif.settings import Settings  # noqa: E402
from agent.whatif.workload import ServedRequest  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--configs", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    requests = workload(args.minutes, args.rate)
    started = time.process_time()
    p = predict(SETTINGS, COST, requests)
    one = time.process_time() - started
    started = time.process_time()
    result = search(SETTINGS, COST, requests, limit=args.configs)
    searched = time.process_time() - started
    emit({"requests": len(requests), "simulated_steps": p.simulation.log.steps,
          "simulate_cpu_s": one, "simulate_target_s": 2.0, "simulate_ratio_to_target": one / 2.0,
          "search_configurations": len(result.evaluated), "search_requests_each": len(requests),
          "search_cpu_s": searched, "search_target_s": 60.0, "search_ratio_to_target": searched / 60.0,
          "predicted_ttft_p99_s": p.figures["ttft_p99_s"], "predicted_throughput_tokens_per_s":
          p.figures["throughput_tokens_per_s"]}, args.json)


if __name__ == "__main__":
    main()
