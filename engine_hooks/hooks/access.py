"""How efficiently attention reads the KV cache in one forward pass.

Useful bytes are the K/V of the tokens in context; moved bytes are the whole blocks read from the
pool (the unused tail of each last block, and the padding of a decode group, are moved too);
gathered bytes are those copied out of the pool because a sequence's blocks are not consecutive.
"""

from __future__ import annotations

from dataclasses import dataclass

from stagelens.engine_hooks.engine.attention import AttentionBatch


@dataclass
class AccessStats:
    useful_bytes: int = 0
    moved_bytes: int = 0
    gathered_bytes: int = 0
    blocks_read: int = 0
    sequences: int = 0
    block_runs: int = 0          # runs of consecutive physical blocks, summed over sequences

    def add(self, other: AccessStats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def access_stats(batch: AttentionBatch, block_size: int, token_bytes: int) -> AccessStats:
    """`token_bytes`: K and V of one token over all layers."""
    block_bytes = token_bytes * block_size
    stats = AccessStats(sequences=len(batch.seqs))
    for seq in batch.seqs:
        stats.useful_bytes += seq.context_len * token_bytes
        stats.block_runs += len(seq.block_runs)
    for group in batch.decodes:
        blocks = group.rows.numel() * group.max_blocks
        stats.blocks_read += blocks
        stats.gathered_bytes += blocks * block_bytes
    for read in batch.prefills:
        blocks = len(read.seq.block_table)
        stats.blocks_read += blocks
        if read.gather_index is not None:
            stats.gathered_bytes += blocks * block_bytes
    stats.moved_bytes = stats.blocks_read * block_bytes
    return stats
