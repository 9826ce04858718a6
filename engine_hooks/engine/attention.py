"""Paged attention: K/V live in block pools; each sequence reads its context through its block
table.

Per step the batch is described once (`describe_batch`) and reused by every layer:
- decodes are read in a few groups of similar length: per group one gather of all their blocks
  (padded to the group's longest), one SDPA in which the query heads sharing a KV head act as that
  head's query rows (no GQA expansion);
- prefills and prefill chunks are read one by one, as a view of the pool when their blocks are
  physically consecutive, through a gather otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class SequenceKV:
    """One sequence of the batch: its query rows and its context in the pool."""
    query_start: int
    query_len: int
    context_len: int                   # tokens in the cache once this step's K/V are written
    block_table: list[int]             # the blocks that hold its context
    block_runs: list[tuple[int, int]]  # (first physical block, count) per run of consecutive blocks


@dataclass
class DecodeBatch:
    rows: torch.Tensor                 # query rows of the decodes
    block_index: torch.Tensor          # [decodes * max_blocks] physical blocks, padded with block 0
    max_blocks: int
    # [decodes, 1, 1, max_blocks * block_size]; None when nothing is padded
    key_mask: torch.Tensor | None
    # Gather buffers, made by the first layer and reused by the others: a fresh allocation this
    # large per layer would cost a page fault per 4 KiB (the allocator returns big blocks to the
    # OS).
    k_buf: torch.Tensor | None = None
    v_buf: torch.Tensor | None = None

    def buffers(self, pool: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (self.block_index.numel(), *pool.shape[1:])
        if self.k_buf is None or self.k_buf.shape != shape or self.k_buf.dtype != pool.dtype:
            self.k_buf = torch.empty(shape, dtype=pool.dtype, device=pool.device)
            self.v_buf = torch.empty_like(self.k_buf)
        return self.k_buf, self.v_buf


@dataclass
class PrefillRead:
    seq: SequenceKV
    gather_index: torch.Tensor | None  # None: the context is one run, read as a view
    mask: torch.Tensor | None          # for a chunk that starts after cached context


@dataclass
class AttentionBatch:
    seqs: list[SequenceKV]
    decodes: list[DecodeBatch]
    prefills: list[PrefillRead]


# A decode group grows while its padding stays under this share of the blocks it reads.
MAX_DECODE_PADDING = 0.2


def block_runs(table: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for b in table:
        if runs and runs[-1][0] + runs[-1][1] == b:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((b, 1))
    return runs


def describe_sequence(query_start: int, query_len: int, context_len: int, table: list[int],
                      block_size: int) -> SequenceKV:
    used = table[:-(-context_len // block_size)]
    return SequenceKV(query_start, query_len, context_len, used, block_runs(used))


def describe_batch(seqs: list[SequenceKV], block_size: int, device: torch.device) -> AttentionBatch:
    decodes = sorted((s for s in seqs if s.query_len == 1), key=lambda s: -len(s.block_table))
    prefills = [_prefill_read(s, device) for s in seqs if s.query_len > 1]
    return AttentionBatch(seqs,
                          [_decode_batch(g, block_size, device) for g in _group_by_length(decodes)],
                          prefills)


def _group_by_length(decodes: list[SequenceKV]) -> list[list[SequenceKV]]:
    """Split decodes, longest first, into groups whose padding stays under MAX_DECODE_PADDING."""
    groups: list[list[SequenceKV]] = []
    useful = 0
    for s in decodes:
        blocks = len(s.block_table)
        if groups:
            widest = len(groups[-1][0].block_table)
            padded = widest * (len(groups[-1]) + 1)
            if padded - (useful + blocks) <= MAX_DECODE_PADDING * padded:
                groups[-1].append(s)
                useful += blocks
                continue
        groups.append([s])
        useful = blocks
    return groups


def _decode_batch(decodes: list[SequenceKV], block_size: int, device: torch.device) -> DecodeBatch:
    max_blocks = max(len(s.block_table) for s in decodes)
    index = [b for s in decodes for b in s.block_table + [0] * (max_blocks - len(s.block_table))]
    lengths = [s.context_len for s in decodes]
    mask = None
    if any(n != max_blocks * block_size for n in lengths):
        keys = torch.arange(max_blocks * block_size, device=device).unsqueeze(0)
        mask = (keys < torch.tensor(lengths, device=device).unsqueeze(1)).view(len(decodes), 1, 1, -1)
    rows = torch.tensor([s.query_start for s in decodes], device=device)
    return DecodeBatch(rows, torch.tensor(index, device=device), max_blocks, mask)


def _prefill_read(seq: SequenceKV, device: torch.device) -> PrefillRead:
    index = None if len(seq.block_runs) == 1 else torch.tensor(seq.block_table, device=device)
    mask = None
    cached = seq.context_len - seq.query_len
    if cached > 0:
        # query row i sits at position cached + i and may see keys 0 .. cached + i
        rows = torch.arange(seq.query_len, device=device).unsqueeze(1) + cached
        mask = torch.arange(seq.context_len, device=device).unsqueeze(0) <= rows
    return PrefillRead(seq, index, mask)


def write_kv(k_pool: torch.Tensor, v_pool: torch.Tensor, slots: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor) -> None:
    """Store this step's K/V ([tokens, kv_heads, head_dim]) at their slots (block * block_size +
    offset)."""
    kv_heads, head_dim = k.shape[1], k.shape[2]
    k_pool.view(-1, kv_heads, head_dim).index_copy_(0, slots, k)
    v_pool.view(-1, kv_heads, head_dim).index_copy_(0, slots, v)


def _read_prefill_context(pool: torch.Tensor, read: PrefillRead) -> torch.Tensor:
    """[kv_heads, context_len, head_dim]: a view of the pool when the blocks are one run."""
    if read.gather_index is None:
        first, count = read.seq.block_runs[0]
        ctx = pool[first:first + count]
    else:
        ctx = pool.index_select(0, read.gather_index)
    return ctx.flatten(0, 1)[:read.seq.context_len].transpose(0, 1)


def paged_attention(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                    batch: AttentionBatch, out: torch.Tensor | None = None) -> torch.Tensor:
    """q: [tokens, heads, head_dim] for the whole batch -> attention output of the same shape."""
    out = torch.empty_like(q) if out is None else out
    tokens, heads, head_dim = q.shape
    kv_heads = k_pool.shape[2]
    for d in batch.decodes:
        n = d.rows.numel()
        k_buf, v_buf = d.buffers(k_pool)
        k = torch.index_select(k_pool, 0, d.block_index, out=k_buf).view(n, -1, kv_heads, head_dim).transpose(1, 2)
        v = torch.index_select(v_pool, 0, d.block_index, out=v_buf).view(n, -1, kv_heads, head_dim).transpose(1, 2)
        qd = q.index_select(0, d.rows).view(n, kv_heads, heads // kv_heads, head_dim)
        o = F.scaled_dot_product_attention(qd, k, v, attn_mask=d.key_mask)
        out.index_copy_(0, d.rows, o.reshape(n, heads, head_dim))
    for read in batch.prefills:
        rows = slice(read.seq.query_start, read.seq.query_start + read.seq.query_len)
        k = _read_prefill_context(k_pool, read)
        v = _read_prefill_context(v_pool, read)
        o = F.scaled_dot_product_attention(q[rows].transpose(0, 1), k, v, attn_mask=read.mask,
                                           is_causal=read.mask is None, enable_gqa=True)
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
