"""Paged attention equals the dense reference for any block table, chunking and block size."""

import random

import pytest
import torch

from stagelens.engine_hooks.engine.attention import (
    block_runs,
    dense_attention,
    describe_batch,
    describe_sequence,
    paged_attention,
    write_kv,
)

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 16


def _run_case(block_size: int, shapes: list[tuple[int, int]], seed: int, device="cpu"):
    """shapes: (cached tokens, new tokens) per sequence; blocks are scattered at random."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    blocks_needed = [-(-(c + n) // block_size) for c, n in shapes]
    num_blocks = sum(blocks_needed) + 7
    physical = list(range(num_blocks))
    rng.shuffle(physical)
    k_pool = torch.zeros(num_blocks, block_size, KV_HEADS, HEAD_DIM, device=device)
    v_pool = torch.zeros_like(k_pool)
    tables, full_k, full_v = [], [], []
    for need, (cached, new) in zip(blocks_needed, shapes, strict=True):
        tables.append([physical.pop() for _ in range(need)])
        full_k.append(torch.randn(cached + new, KV_HEADS, HEAD_DIM, device=device))
        full_v.append(torch.randn(cached + new, KV_HEADS, HEAD_DIM, device=device))
    # the cached part is already in the pool, written slot by slot
    for table, (cached, _), k, v in zip(tables, shapes, full_k, full_v, strict=True):
        if cached:
            slots = torch.tensor([table[p // block_size] * block_size + p % block_size for p in range(cached)],
                                 device=device)
            write_kv(k_pool, v_pool, slots, k[:cached], v[:cached])
    # this step's K/V and queries, flattened over the batch
    q_rows, new_k, new_v, slots, seqs = [], [], [], [], []
    start = 0
    for table, (cached, new), k, v in zip(tables, shapes, full_k, full_v, strict=True):
        q_rows.append(torch.randn(new, HEADS, HEAD_DIM, device=device))
        new_k.append(k[cached:])
        new_v.append(v[cached:])
        slots += [table[p // block_size] * block_size + p % block_size for p in range(cached, cached + new)]
        seqs.append(describe_sequence(start, new, cached + new, table, block_size))
        start += new
    q = torch.cat(q_rows)
    write_kv(k_pool, v_pool, torch.tensor(slots, device=device), torch.cat(new_k), torch.cat(new_v))
    out = paged_attention(q, k_pool, v_pool, describe_batch(seqs, block_size, torch.device(device)))
    for i, (cached, _new) in enumerate(shapes):
        rows = slice(seqs[i].query_start, seqs[i].query_start + seqs[i].query_len)
        expected = dense_attention(q[rows].cpu(), full_k[i].cpu(), full_v[i].cpu(), cached)
        torch.testing.assert_close(out[rows].cpu(), expected, atol=2e-5, rtol=2e-4)


@pytest.mark.parametrize("block_size", [8, 16, 32, 64, 128])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mixed_batch_of_prefill_chunks_and_decodes(block_size, seed):
    rng = random.Random(seed * 31 + block_size)
    shapes = [(0, rng.randint(1, 300)),             # a whole prefill
              (rng.randint(1, 200), rng.randint(2, 150)),  # a later prefill chunk
              (rng.randint(1, 400), 1),             # decodes
              (rng.randint(1, 50), 1),
              (block_size, 1),                      # a decode that opens a new block
              (block_size - 1, 1)]                  # a decode that fills its last block
    _run_case(block_size, shapes, seed)


def test_single_token_prompt():
    _run_case(16, [(0, 1)], 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_paged_attention_on_cuda():
    _run_case(16, [(0, 100), (50, 30), (200, 1)], 0, device="cuda")


def test_block_runs_groups_consecutive_blocks():
    assert block_runs([4, 5, 6, 9, 10, 2]) == [(4, 3), (9, 2), (2, 1)]
    assert block_runs([]) == []
