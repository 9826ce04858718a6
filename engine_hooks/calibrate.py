"""The read bandwidth attention achieves on this device when K/V are dense and contiguous.

Paged attention is judged against it: the ratio isolates what paging, partial blocks and gathers
cost. (On a GPU this is close to the copy bandwidth; on a CPU attention is compute-bound and far
below it, so the copy bandwidth alone would make every CPU engine look degraded.)
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

_cache: dict[tuple, float] = {}


def dense_attention_bandwidth(kv_heads: int, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device,
                              batch: int = 16, context: int = 512, runs: int = 5) -> float:
    """K/V bytes read per second by a batched dense decode attention (best of `runs`)."""
    key = (kv_heads, heads, head_dim, dtype, str(device), batch, context)
    if key in _cache:
        return _cache[key]
    k = torch.randn(batch, kv_heads, context, head_dim, dtype=dtype, device=device)
    v = torch.randn_like(k)
    q = torch.randn(batch, kv_heads, heads // kv_heads, head_dim, dtype=dtype, device=device)
    best = float("inf")
    for _ in range(runs + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t)
    _cache[key] = 2 * k.numel() * k.element_size() / best
    return _cache[key]
