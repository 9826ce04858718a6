"""Paged attention: K/V live in block pools; each sequence reads its context through its block table.

A sequence whose blocks are physically consecutive is read as a view of the pool (no copy); only
a fragmented block table pays for a gather. Prefill chunks, whole prefills and decodes mix freely
in one batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class SequenceKV:
    """Where one sequence of the batch sits: its query rows and its context in the pool."""
    query_start: int
    query_len: int
    context_len: int              # tokens in the cache once this step's K/V are written
    block_runs: list[tuple[int, int]]  # (first physical block, count) per run of consecutive blocks
    gather_index: torch.Tensor | None  # physical blocks, when there is more than one run
    mask: torch.Tensor | None     # for a prefill chunk that starts after cached context


def block_runs(table: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for b in table:
        if runs and runs[-1][0] + runs[-1][1] == b:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((b, 1))
    return runs


def describe_sequence(query_start: int, query_len: int, context_len: int, table: list[int],
                      block_size: int, device: torch.device) -> SequenceKV:
    nblocks = -(-context_len // block_size)
    runs = block_runs(table[:nblocks])
    index = None if len(runs) == 1 else torch.tensor(table[:nblocks], dtype=torch.long, device=device)
    mask = None
    cached = context_len - query_len
    if query_len > 1 and cached > 0:
        # query row i sits at position cached + i and may see keys 0 .. cached + i
        rows = torch.arange(query_len, device=device).unsqueeze(1) + cached
        mask = torch.arange(context_len, device=device).unsqueeze(0) <= rows
    return SequenceKV(query_start, query_len, context_len, runs, index, mask)


def write_kv(k_pool: torch.Tensor, v_pool: torch.Tensor, slots: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor) -> None:
    """Store this step's K/V ([tokens, kv_heads, head_dim]) at their slots (block * block_size + offset)."""
    kv_heads, head_dim = k.shape[1], k.shape[2]
    k_pool.view(-1, kv_heads, head_dim).index_copy_(0, slots, k)
    v_pool.view(-1, kv_heads, head_dim).index_copy_(0, slots, v)


def read_context(pool: torch.Tensor, seq: SequenceKV) -> torch.Tensor:
    """The sequence's context as [context_len, kv_heads, head_dim]: a view when its blocks are one run."""
    if seq.gather_index is None:
        first, count = seq.block_runs[0]
        ctx = pool[first:first + count]
    else:
        ctx = pool.index_select(0, seq.gather_index)
    return ctx.flatten(0, 1)[:seq.context_len]


def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                    seqs: list[SequenceKV], out: torch.Tensor | None = None) -> torch.Tensor:
    """q: [tokens, heads, head_dim] for the whole batch -> attention output of the same shape."""
    out = torch.empty_like(q) if out is None else out
    for seq in seqs:
        rows = slice(seq.query_start, seq.query_start + seq.query_len)
        k = read_context(k_pool, seq).transpose(0, 1)
        v = read_context(v_pool, seq).transpose(0, 1)
        qs = q[rows].transpose(0, 1)
        causal = seq.query_len > 1 and seq.mask is None
        o = F.scaled_dot_product_attention(qs, k, v, attn_mask=seq.mask, is_causal=causal, enable_gqa=True)
        out[rows] = o.transpose(0, 1)
    return out


def dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cached: int) -> torch.Tensor:
    """Reference: q [n, heads, d] at positions cached..cached+n-1 over k, v [cached+n, kv_heads, d].

    Written from the definition (no SDPA, no pool) so tests compare against an independent path.
    """
    heads, kv_heads = q.shape[1], k.shape[1]
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k.double()) / q.shape[-1] ** 0.5
    positions = torch.arange(q.shape[0]).unsqueeze(1) + cached
    visible = torch.arange(k.shape[0]).unsqueeze(0) <= positions
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v.double()).to(q.dtype)
