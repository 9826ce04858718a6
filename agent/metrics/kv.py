"""KV cache metrics: capacity and use of blocks, fragmentation, access efficiency, read
bandwidth."""

from __future__ import annotations

from stagelens import catalogue as c
from stagelens.metrics.families import Scrape

# the figures read as the snapshot holds them
AS_HELD = (c.KV_CAPACITY, c.KV_BLOCK_SIZE, c.KV_FRAGMENTATION, c.KV_ACCESS_EFFICIENCY,
           c.KV_READ_BANDWIDTH, c.KV_EFFECTIVE_BANDWIDTH, c.KV_BANDWIDTH_SWING, c.KV_GATHERED,
           c.KV_BLOCK_RUNS, c.KV_ATTENTION_SHARE, c.KV_USEFUL_BYTES, c.KV_MOVED_BYTES,
           c.KV_GATHERED_BYTES, c.KV_ATTENTION_SECONDS, c.KV_BLOCKS_STORED, c.KV_BLOCKS_REMOVED,
           c.KV_BLOCKS_RESTORED, c.KV_BLOCK_LIFETIME_P50, c.KV_BLOCKS, c.KV_USED_BLOCKS,
           c.KV_UNUSABLE_FREE_BLOCKS, c.KV_LARGEST_FREE_RUN)


def collect(out: Scrape, frame, _diagnosis) -> None:
    engine = frame.engine if frame else None
    if engine is None:
        return
    out.add_as_held(engine, AS_HELD)
    usage = engine.usage
    if usage is None:
        return
    total, used = usage.num_blocks, usage.used_blocks
    known = total is not None and used is not None
    out.add(c.KV_FREE_BLOCKS, total - used if known else None)
    out.add(c.KV_USAGE, used / total if known and total else None)
