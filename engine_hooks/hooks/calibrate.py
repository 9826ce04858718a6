"""What this engine's own paged attention achieves when the KV layout is ideal.

Each sequence's blocks are consecutive, its context fills whole blocks and all sequences have one
length (no partial blocks, no padding, no gathers beyond the batch's one). Timed over a grid of
batch sizes and context lengths, this is the reference an engine step's read bandwidth is judged
by: the ratio isolates what the live layout costs (fragmentation, partial blocks, padding), not
what the device or the implementation costs at that size.
"""

from __future__ import annotations

import time

import torch

from stagelens.engine_hooks.engine.attention import describe_batch, describe_sequence, paged_attention

SEQUENCES = (1, 4, 16, 64)
CONTEXT_BLOCKS = (1, 4, 16, 64)
_cache: dict[tuple, dict] = {}


def ideal_layout_curve(kv_heads: int, heads: int, head_dim: int, block_size: int,
                       dtype: torch.dtype, device: torch.device, runs: int = 3) -> dict:
    """{"sequences": [...], "curves": [[(bytes one attention call reads, bytes/s), ...] per batch
    size]}."""
    key = (kv_heads, heads, head_dim, block_size, dtype, str(device))
    if key not in _cache:
        curves = [[_measure(kv_heads, heads, head_dim, block_size, dtype, device, n, blocks, runs)
                   for blocks in CONTEXT_BLOCKS] for n in SEQUENCES]
        _cache[key] = {"sequences": list(SEQUENCES), "curves": curves}
    return _cache[key]


def _measure(kv_heads, heads, head_dim, block_size, dtype, device, seqs, blocks, runs) -> tuple[float, float]:
    k_pool = torch.randn(seqs * blocks, block_size, kv_heads, head_dim, dtype=dtype, device=device)
    v_pool = torch.randn_like(k_pool)
    context = blocks * block_size
    described = [describe_sequence(i, 1, context, list(range(i * blocks, (i + 1) * blocks)),
                                   block_size)
                 for i in range(seqs)]
    batch = describe_batch(described, block_size, device)
    q = torch.randn(seqs, heads, head_dim, dtype=dtype, device=device)
    out = torch.empty_like(q)
    best = float("inf")
    for _ in range(runs + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        paged_attention(q, k_pool, v_pool, batch, out=out)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t)
    nbytes = 2 * k_pool.numel() * k_pool.element_size()
    return float(nbytes), nbytes / best
