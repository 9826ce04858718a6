"""Engine benchmark: paged vs dense attention, KV read bandwidth, paged vs contiguous throughput, KV waste.

    python bench/engine.py [--quick | --smoke] [--json] [--device cuda] [--model-dir DIR]

Prints figures and ratios from one run; A/B pairs are interleaved. Never pass/fail.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _device import add_engine_flags, checked_device, synchronize  # noqa: E402  (bench/ is the script's own)
from _report import emit  # noqa: E402

from stagelens.engine_hooks.engine import EngineConfig  # noqa: E402
from stagelens.engine_hooks.engine.attention import describe_batch, describe_sequence, paged_attention  # noqa: E402
from stagelens.engine_hooks.engine.presets import PRESETS  # noqa: E402
from stagelens.lab.scenario_run import run_lab  # noqa: E402
from stagelens.lab.workload import LengthDist, WorkloadConfig  # noqa: E402


def _timed(fn, repeats: int, device: torch.device) -> float:
    """Median seconds of `fn()` over `repeats` calls, after one warm-up call, each until the device is done."""
    fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        t = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def attention_figures(batch: int, context: int, block_size: int, repeats: int, scattered: bool,
                      device: torch.device) -> dict:
    """Decode attention of `batch` sequences of `context` tokens, paged vs dense SDPA on the same bytes."""
    with torch.device(device):
        return _attention_figures(batch, context, block_size, repeats, scattered, device)


def _attention_figures(batch, context, block_size, repeats, scattered, device) -> dict:
    p = PRESETS["small"]
    torch.manual_seed(0)
    blocks_per_seq = context // block_size
    num_blocks = batch * blocks_per_seq
    k_pool = torch.randn(num_blocks, block_size, p.num_kv_heads, p.head_dim)
    v_pool = torch.randn_like(k_pool)
    order = list(range(num_blocks))
    if scattered:   # blocks handed out interleaved, as decodes of many sequences grow them
        random.Random(0).shuffle(order)
    tables = [order[i * blocks_per_seq:(i + 1) * blocks_per_seq] for i in range(batch)]
    q = torch.randn(batch, p.num_heads, p.head_dim)
    seqs = [describe_sequence(i, 1, context, tables[i], block_size) for i in range(batch)]
    attention = describe_batch(seqs, block_size, device)
    # the dense layout holds exactly the same K/V bytes, contiguous per sequence
    k_dense = torch.stack([k_pool[t].flatten(0, 1) for t in tables]).transpose(1, 2).contiguous()
    v_dense = torch.stack([v_pool[t].flatten(0, 1) for t in tables]).transpose(1, 2).contiguous()
    out = torch.empty_like(q)

    def paged():
        paged_attention(q, k_pool, v_pool, attention, out=out)

    def dense():
        F.scaled_dot_product_attention(q.unsqueeze(2), k_dense, v_dense, enable_gqa=True)

    def copy():
        k_dense.clone()
        v_dense.clone()

    t_paged, t_dense, t_copy = [], [], []
    for _ in range(repeats):   # interleaved A/B
        t_paged.append(_timed(paged, 3, device))
        t_dense.append(_timed(dense, 3, device))
        t_copy.append(_timed(copy, 3, device))
    paged_s, dense_s, copy_s = (statistics.median(x) for x in (t_paged, t_dense, t_copy))
    kv_bytes = 2 * k_dense.numel() * k_dense.element_size()
    expected = F.scaled_dot_product_attention(q.unsqueeze(2), k_dense, v_dense, enable_gqa=True).squeeze(2)
    paged()
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    return {
        "paged_attention_ms": paged_s * 1000,
        "dense_attention_ms": dense_s * 1000,
        "paged_vs_dense_attention_ratio": paged_s / dense_s,
        "kv_read_bandwidth_gbps": kv_bytes / paged_s / 1e9,
        "copy_bandwidth_gbps": kv_bytes / copy_s / 1e9,   # the same bytes read (and written) by a plain copy
        "kv_read_bandwidth_ratio": copy_s / paged_s,
    }


def throughput_figures(duration: float, pairs: int, model: str, device: torch.device,
                       model_dir: str | None = None) -> dict:
    """Paged vs contiguous at the same KV memory, on requests much shorter than max_model_len."""
    common = dict(model=model, max_model_len=2048, max_num_seqs=32, kv_cache_memory="64MiB", device=str(device),
                  model_dir=model_dir)
    workload = WorkloadConfig(rate=None, concurrency=32, prompt_len=LengthDist("uniform", 64, 192),
                              output_len=LengthDist("uniform", 96, 224), duration=duration,
                              warmup=duration / 4)
    results: dict[str, list[dict]] = {"paged": [], "contiguous": []}
    for _ in range(pairs):   # interleaved A/B
        for allocator in ("paged", "contiguous"):
            results[allocator].append(run_lab(EngineConfig(allocator=allocator, **common), workload).figures)

    def med(kind, key):
        return statistics.median(r[key] for r in results[kind])

    return {
        "paged_throughput_tokens_per_s": med("paged", "throughput_tokens_per_s"),
        "contiguous_throughput_tokens_per_s": med("contiguous", "throughput_tokens_per_s"),
        "paged_vs_contiguous_throughput_ratio": med("paged", "throughput_tokens_per_s")
        / med("contiguous", "throughput_tokens_per_s"),
        "kv_waste_ratio": med("paged", "kv_waste_ratio"),
        "contiguous_kv_waste_ratio": med("contiguous", "kv_waste_ratio"),
        "contiguous_max_batch": EngineConfig(allocator="contiguous", **common).num_blocks()
        // EngineConfig(**common).blocks_per_request(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of under a minute")
    parser.add_argument("--json", action="store_true")
    add_engine_flags(parser)
    args = parser.parse_args()
    device = checked_device(parser, args)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    # (sequences, context, repeats, seconds a throughput run, pairs, model): smoke, quick or full
    batch, context, repeats, duration, pairs, model = (
        (2, 64, 1, 1.0, 1, "tiny") if args.smoke else (16, 1024, 5, 8.0, 1, "small") if args.quick
        else (16, 1024, 15, 30.0, 3, "small"))
    figures = {"device": str(device), "torch_threads": torch.get_num_threads()}
    figures.update(attention_figures(batch, context, 16, repeats, scattered=True, device=device))
    contiguous_blocks = attention_figures(batch, context, 16, repeats, scattered=False, device=device)
    figures["paged_vs_dense_attention_ratio_contiguous_blocks"] = contiguous_blocks["paged_vs_dense_attention_ratio"]
    figures.update(throughput_figures(duration, pairs, model, device, args.model_dir))
    emit(figures, args.json)

if __name__ == "__main__":
    main()
