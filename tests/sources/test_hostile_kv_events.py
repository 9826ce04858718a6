"""A hostile KV-event publisher (issue 24 items 4 and 13): what it sends cannot grow the subscriber's memory past
its cap, stall the lock (and with it the sampler) on big removals, or count absurd losses. Messages are given to
the subscriber the way its reading thread gives them (`handle`), in vLLM's wire format."""

from __future__ import annotations

import time

from stagelens.engine_hooks.engine.vllm_face.kv_events_publisher import BlockRemoved, BlockStored, encode_batch
from stagelens.sources.kv_events.subscriber import (
    MAX_ARRAY_LEN,
    MAX_SEQUENCE_GAP,
    KvEventsSubscriber,
)

BS = 16


class Feed:
    """Messages in sequence to one subscriber (never started: no socket is needed to read a message)."""

    def __init__(self, **kw) -> None:
        self.sub = KvEventsSubscriber("tcp://127.0.0.1:1", **kw)
        self.seq = 0

    def send(self, *events, seq: int | None = None, ts: float = 1.0) -> None:
        self.seq = self.seq if seq is None else seq
        self.sub.handle([b"", self.seq.to_bytes(8, "big"), encode_batch(ts, list(events))])
        self.seq += 1


def test_the_same_block_stored_over_and_over_is_held_to_the_live_cap_and_the_dropped_counted():
    feed = Feed(max_live_blocks=100)
    for _ in range(20):
        feed.send(BlockStored((7,) * 100, None, (), BS))
    f = feed.sub.figures(0.0)
    assert (f.blocks_stored, f.live_blocks, f.dropped_blocks) == (2000, 100, 1900)
    feed.send(BlockRemoved((7,) * 150))        # the copies kept are removed; the rest were never seen
    f = feed.sub.figures(0.0)
    assert (f.live_blocks, f.blocks_removed, f.unmatched_removals) == (0, 150, 50)


def _removal_seconds(copies: int) -> float:
    """The best of three times one message of 2,000 removals of a block stored `copies` times takes to read."""
    feed = Feed(max_live_blocks=copies)
    for start in range(0, copies, 100_000):
        feed.send(BlockStored((7,) * min(100_000, copies - start), None, (), BS))
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        feed.send(BlockRemoved((7,) * 2000), ts=2.0)
        best = min(best, time.perf_counter() - started)
    assert feed.sub.figures(0.0).live_blocks == copies - 6000
    return best


def test_big_removals_of_a_block_stored_many_times_cost_per_removal_not_per_copy_kept():
    # front-of-list removal made one message cost its removals x the copies kept (minutes under the lock);
    # per removal, the same message costs the same whatever is kept: 100 times more copies, about the same time
    few, many = _removal_seconds(6_000 + 3_000), _removal_seconds(6_000 + 300_000)
    assert many < 20 * few, (few, many)


def test_a_sequence_jump_to_the_last_number_is_a_new_numbering_not_lost_batches():
    feed = Feed()
    feed.send(seq=0)
    feed.send(seq=5)                                  # four batches lost on the way
    feed.send(seq=6 + MAX_SEQUENCE_GAP)               # as many lost as is plausible
    feed.send(seq=2**64 - 1)                          # 1.8e19 "lost": a publisher numbering anew, or lying
    f = feed.sub.figures(0.0)
    assert (f.lost_batches, f.sequence_resets, f.malformed) == (4 + MAX_SEQUENCE_GAP, 1, 0)


def test_a_message_of_millions_of_one_byte_hashes_is_malformed_not_unpacked_into_the_live_blocks():
    feed = Feed()
    feed.send(BlockStored((7,) * (4 * MAX_ARRAY_LEN), None, (), BS))     # 1 MiB of msgpack, 1M hashes
    feed.send(BlockStored((8,) * 10, None, (), BS))
    f = feed.sub.figures(0.0)
    assert (f.malformed, f.blocks_stored, f.live_blocks) == (1, 10, 10)
