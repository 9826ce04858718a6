"""What-if's cases past the recorded range (bench/whatif.py `--beyond`): the questions users ask most, raise
the batch, the budget, the KV memory or the load, asked of a recording that never went there. Each A is a
small lab configuration of its own (not a scenario); each B changes one flag far outside what A ran, or
replays A's arrivals faster. Chosen for the direction users ask in and for a spread of outcomes: P99 falling
by a wide margin (a batch or cache that held the queue), rising (less KV, more load: the wall), and staying.
"""

from __future__ import annotations

SHORT = {"model": "small", "max_model_len": 2048, "prompt_len": "lognormal:64:0.5", "output_len": "uniform:16:48"}
LONG = {"model": "small", "max_model_len": 768, "prompt_len": "lognormal:128:0.5", "output_len": "uniform:32:96"}
# name -> A's flags (lab names). The small model's KV is 8 KiB a token: 8MiB holds ~1,000 tokens, ~5 requests
# of LONG's
BASES = {
    "batch-of-2": {**SHORT, "max_num_seqs": 2, "rate": 8.0},
    "budget-64": {**SHORT, "prompt_len": "lognormal:256:0.5", "enable_chunked_prefill": True,
                  "max_num_batched_tokens": 64, "rate": 3.0},
    "kv-8MiB": {**LONG, "kv_cache_memory": "8MiB", "rate": 3.0},
    "kv-32MiB": {**LONG, "kv_cache_memory": "32MiB", "rate": 3.0},
    "batch-of-4-kv-12MiB": {**LONG, "max_num_seqs": 4, "kv_cache_memory": "12MiB", "rate": 3.0},
    "rate-4": {**LONG, "rate": 4.0},
}
# name -> B's: a flag change (field -> value) or a rate factor
CASES = {
    "batch-of-2": [{"max_num_seqs": 8}, {"max_num_seqs": 16}, {"max_num_seqs": 32}, {"max_num_seqs": 64}],
    "budget-64": [{"max_num_batched_tokens": 512}],
    # the same arrivals 1.5 times as fast: past what 8 MiB holds at once (the KV wall), within what 32 MiB does
    "kv-8MiB": [{"kv_cache_memory": "16MiB"}, {"kv_cache_memory": "32MiB"}, 1.5],
    "kv-32MiB": [{"kv_cache_memory": "8MiB"}, 1.5],
    "batch-of-4-kv-12MiB": [{"max_num_seqs": 32}],
    "rate-4": [2.0, 3.0],
}
TARGETS = {"median_abs_error_ttft_p50": 0.15, "median_abs_error_ttft_p99": 0.25,
           "median_abs_error_throughput": 0.10}
FACTOR = 3.0        # a P99 this many times A's (or A's over this) must be predicted so too


def direction(measured_a: float | None, measured_b: float | None, predicted_a: float | None,
              predicted_b: float | None) -> dict | None:
    """Whether a P99 that moved by FACTOR or more, measured, was predicted to move so too (B over A each)."""
    if None in (measured_a, measured_b, predicted_a, predicted_b) or not measured_a or not predicted_a:
        return None
    measured, predicted = measured_b / measured_a, predicted_b / predicted_a
    moved = "up" if measured >= FACTOR else "down" if measured <= 1 / FACTOR else None
    held = None if moved is None else (predicted >= FACTOR if moved == "up" else predicted <= 1 / FACTOR)
    return {"measured_ratio": measured, "predicted_ratio": predicted, "moved": moved, "held": held}
