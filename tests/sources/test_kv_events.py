"""vLLM's KV-cache events end to end over real ZMQ sockets: the bundled engine publishes them in vLLM's wire
format (engine_hooks/engine/vllm_face/kv_events_publisher.py), the agent's subscriber
(agent/sources/kv_events/subscriber.py) reads them."""

import threading
import time
from dataclasses import replace

import msgpack
import pytest
import zmq

from stagelens.engine_hooks.engine import EngineConfig, FinishReason, LLMEngine, SamplingParams
from stagelens.engine_hooks.engine.vllm_face.kv_events_publisher import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEventsPublisher,
    block_hash,
    encode_batch,
)
from stagelens.sources.kv_events.subscriber import KvEventsSubscriber
from tests.helpers.polling import wait_for

BS = 16
TCP = "tcp://127.0.0.1:*"     # the publisher binds any free port and says which in `endpoint`


def _engine(model_dir, **kw) -> LLMEngine:
    settings = dict(model="tiny", model_dir=model_dir, max_model_len=128, kv_cache_memory="2MiB", block_size=BS,
                    device="cpu")
    settings.update(kw)
    return LLMEngine(EngineConfig(**settings))


def _prompt(seed: int, n: int) -> list[int]:
    return [(seed * 31 + 7 * j) % 256 for j in range(n)]


def _until(predicate, timeout: float = 5.0, what: str = "condition"):
    return wait_for(predicate, timeout, what, every=0.005)


class RawSub:
    """A bare SUB socket: the wire as it is, frame by frame."""

    def __init__(self, ctx, endpoint: str, topic: bytes = b""):
        self.sock = ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SUBSCRIBE, topic)
        self.sock.connect(endpoint)
        self.messages: list[tuple[bytes, int, object]] = []

    def drain(self, timeout_ms: int = 10) -> None:
        while self.sock.poll(timeout_ms):
            topic, seq, payload = self.sock.recv_multipart()
            assert len(seq) == 8
            self.messages.append((topic, int.from_bytes(seq, "big"), msgpack.unpackb(payload, raw=False)))

    def close(self) -> None:
        self.sock.close(linger=0)


def _join(pub: KvEventsPublisher, subscribers=(), raws=()) -> None:
    """ZMQ's slow joiner: probe (empty batches) until every subscriber has read one, then drop the probes."""
    def joined():
        pub.publish([])
        for raw in raws:
            raw.drain(5)
        return all(s.last_sequence is not None for s in subscribers) and all(r.messages for r in raws)

    _until(joined, what="the subscribers to join")
    _flushed(pub, subscribers, raws)
    for raw in raws:
        raw.messages.clear()


def _flushed(pub: KvEventsPublisher, subscribers=(), raws=()) -> None:
    """Every batch queued so far has been sent and read."""
    _until(lambda: pub.sent == pub.batches, what="the publisher to send its queue")
    last = pub.sent - 1

    def read():
        for raw in raws:
            raw.drain(5)
        return (all(s.last_sequence == last for s in subscribers)
                and all(r.messages and r.messages[-1][1] == last for r in raws))

    _until(read, what="the subscribers to read every batch")


def _events(raw: RawSub, tag: str) -> list[list]:
    return [e for _, _, batch in raw.messages for e in batch[1] if e[0] == tag]


def test_stored_blocks_are_the_prompts_full_blocks_and_leave_when_requests_finish(model_dir):
    engine = _engine(model_dir, models=2, num_preload_models=2)
    pub = KvEventsPublisher(TCP, engine)
    engine.add_observer(pub)     # registered a second time, as VllmFace does: still one event each
    sub = KvEventsSubscriber(pub.endpoint, topic="kv-events")
    ctx = zmq.Context()
    raw = RawSub(ctx, pub.endpoint)
    try:
        sub.start()
        _join(pub, [sub], [raw])
        since = time.monotonic()
        # Prompts of exactly k blocks; one output token, whose K/V is never computed: k full blocks each.
        prompts = {"a": _prompt(1, 2 * BS), "b": _prompt(2, 3 * BS), "c": _prompt(3, 1 * BS)}
        requests = [engine.submit(p, SamplingParams(max_tokens=1), request_id=rid) for rid, p in prompts.items()]
        lora = engine.submit(prompts["a"], SamplingParams(max_tokens=1), model="model-1", request_id="lora")
        engine.run_until_idle(60)
        assert all(r.finish_reason == FinishReason.LENGTH for r in [*requests, lora])
        _flushed(pub, [sub], [raw])

        stored = _events(raw, "BlockStored")
        by_tokens = {}
        for _, hashes, parent, tokens, block_size, lora_id, medium, lora_name in stored:
            assert block_size == BS and medium == "GPU"
            assert len(tokens) == len(hashes) * BS
            for i, h in enumerate(hashes):   # each hash chains its parent's and its own tokens
                chunk = tokens[i * BS:(i + 1) * BS]
                model = "model-0" if lora_id is None else f"model-{lora_id}"
                assert h == block_hash(parent if i == 0 else hashes[i - 1], chunk, model)
            by_tokens.setdefault((lora_id, lora_name), []).append(tokens)
        assert sorted(map(tuple, by_tokens[(None, None)])) == sorted(map(tuple, prompts.values()))
        assert by_tokens[(1, "model-1")] == [prompts["a"]]
        lora_hashes = {h for e in stored if e[5] == 1 for h in e[1]}
        base_a_hashes = {h for e in stored if e[5] is None and e[3] == prompts["a"] for h in e[1]}
        assert lora_hashes and not lora_hashes & base_a_hashes      # the model is part of the hash

        stored_hashes = sorted(h for e in stored for h in e[1])
        removed_hashes = sorted(h for e in _events(raw, "BlockRemoved") for h in e[1])
        assert removed_hashes == stored_hashes and len(stored_hashes) == 2 + 3 + 1 + 2
        assert all(seq == i for i, (_, seq, _) in enumerate(raw.messages, start=raw.messages[0][1]))
        assert {topic for topic, _, _ in raw.messages} == {b"kv-events"}
        assert all(len(batch) == 3 and batch[2] == 0 for _, _, batch in raw.messages)   # [ts, events, dp rank]

        f = sub.figures(since)
        assert (f.blocks_stored, f.blocks_removed, f.live_blocks, f.clears) == (8, 8, 0, 0)
        assert f.lifetime_mean_s is not None and f.lifetime_p50_s is not None and f.lifetime_mean_s >= 0
        assert (f.malformed, f.unknown_events, f.lost_batches, f.restored_blocks) == (0, 0, 0, 0)
        assert pub.dropped == 0 and engine.observer_errors["KvEventsPublisher"] == 0
    finally:
        pub.close()
        sub.stop()
        raw.close()
        ctx.term()


@pytest.mark.parametrize("allocator", ["paged", "contiguous"])
def test_decodes_grow_with_decode_steps_and_close_clears(model_dir, allocator):
    engine = _engine(model_dir, allocator=allocator)
    pub = KvEventsPublisher(TCP, engine, encoding="map")
    sub = KvEventsSubscriber(pub.endpoint)
    try:
        sub.start()
        _join(pub, [sub])
        # 20-token prompts, 30 outputs: 49 tokens computed by the end, 3 full blocks each (the third by decode).
        for i in range(3):
            engine.submit(_prompt(10 + i, 20), SamplingParams(max_tokens=30))
        engine.run_until_idle(60)
        _flushed(pub, [sub])
        f = sub.figures()
        assert (f.blocks_stored, f.blocks_removed, f.live_blocks) == (9, 9, 0)
        pub.close()
        _until(lambda: sub.figures().clears == 1, what="AllBlocksCleared")
        assert pub.publish([]) is False     # closed
    finally:
        pub.close()
        sub.stop()


def _preemption_run(model_dir, endpoint: str, encoding: str):
    # 12 blocks of 16 tokens; 6 requests that each grow to 88 tokens (6 blocks): recompute preemption.
    engine = _engine(model_dir, kv_cache_memory=12 * BS * 512, max_num_batched_tokens=128)
    assert engine.config.num_blocks() == 12
    pub = KvEventsPublisher(endpoint, engine, encoding=encoding)
    sub = KvEventsSubscriber(pub.endpoint, restore_window_s=60)
    try:
        sub.start()
        _join(pub, [sub])
        since = time.monotonic()
        requests = [engine.submit(_prompt(20 + i, 48), SamplingParams(max_tokens=40)) for i in range(6)]
        engine.run_until_idle(60)
        _flushed(pub, [sub])
        figures = sub.figures(since)
    finally:
        pub.close()
        sub.stop()
    full_blocks = sum((r.num_prompt_tokens + len(r.output_token_ids) - 1) // BS for r in requests)
    return engine, figures, full_blocks


def test_preemption_shows_as_restored_blocks_and_both_encodings_read_the_same(model_dir, tmp_path):
    engine, array, full_blocks = _preemption_run(model_dir, TCP, "array")
    assert engine.totals.preemptions > 0
    assert array.restored_blocks > 0
    # Every distinct block is stored once; each recompute after a preemption stores its blocks again.
    assert array.blocks_stored == full_blocks + array.restored_blocks
    assert array.blocks_removed == array.blocks_stored and array.live_blocks == 0

    _, mapped, _ = _preemption_run(model_dir, f"ipc://{tmp_path}/kv.sock", "map")
    def counts(f):
        return (f.blocks_stored, f.blocks_removed, f.clears, f.restored_blocks, f.live_blocks, f.batches,
                f.malformed, f.malformed_events, f.unknown_events, f.lost_batches)
    assert counts(mapped) == counts(array)


def test_both_encodings_of_the_same_events_give_the_same_figures():
    events = [BlockStored((11, 12), None, tuple(range(2 * BS)), BS), BlockStored((b"\x01" * 32,), 12, (1,) * BS, BS)]
    later = [BlockRemoved((11, 12, b"\x01" * 32))]
    again = [BlockStored((11,), None, tuple(range(BS)), BS), AllBlocksCleared()]
    figures = []
    for encoding in ("array", "map"):
        sub = KvEventsSubscriber("tcp://127.0.0.1:1")   # fed by hand: never started
        for seq, (ts, batch) in enumerate([(100.0, events), (102.5, later), (103.0, again)]):
            sub.handle([b"kv-events", seq.to_bytes(8, "big"), encode_batch(ts, batch, 0, encoding)])
        figures.append(sub.figures(0.0))
    a, m = (replace(f, window_s=0.0) for f in figures)
    assert a == m
    assert (a.blocks_stored, a.blocks_removed, a.restored_blocks, a.clears, a.live_blocks) == (4, 3, 1, 1, 0)
    assert a.lifetime_mean_s == pytest.approx(2.5) and a.lifetime_p50_s == pytest.approx(2.5)
    assert (a.malformed, a.unknown_events, a.lost_batches) == (0, 0, 0)


def test_malformed_unknown_and_lost_batches_are_counted_and_reading_goes_on():
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    sub = KvEventsSubscriber(f"tcp://127.0.0.1:{port}", topic="kv")
    seq = 0

    def send(payload, topic=b"kv", frames=None):
        nonlocal seq
        pub.send_multipart(frames or [topic, seq.to_bytes(8, "big"), payload])
        seq += 1

    try:
        sub.start()
        _until(lambda: send(encode_batch(1.0, [])) or sub.last_sequence is not None, what="the subscriber to join")
        _until(lambda: sub.last_sequence == seq - 1, what="the probes")
        base = sub.figures()
        since = time.monotonic()
        send(encode_batch(10.0, [BlockStored((1, 2), None, tuple(range(2 * BS)), BS)]))
        send(b"\xc1\x00")                                         # not msgpack
        send(msgpack.packb(42))                                   # msgpack, not a batch
        send(encode_batch(11.0, [["BlockEvicted", [1]], 7, {"type": "Spilled"}, ["BlockRemoved", [1], "GPU"]]))
        send(encode_batch(11.5, [["BlockStored", "not-a-list", None, [], BS, None, "GPU"]]))
        pub.send_multipart([b"kv", b"\x00"])                      # two frames, a short sequence number
        send(b"", topic=b"other")                                 # another topic: filtered out by ZMQ
        seq += 2                                                  # two batches lost on the way
        send(encode_batch(12.0, [{"type": "BlockRemoved", "block_hashes": [2], "medium": "GPU"}], None, "map"))
        _until(lambda: sub.last_sequence == seq - 1, what="the last batch")
        f = sub.figures(since)
        assert f.messages - base.messages == 7
        assert (f.malformed, f.malformed_events, f.unknown_events) == (3, 1, 3)
        assert f.lost_batches == 2 + 1        # the filtered topic's number is a gap too, as for any subscriber
        assert (f.blocks_stored, f.blocks_removed, f.live_blocks) == (2, 2, 0)
        assert f.lifetime_mean_s == pytest.approx(1.5)
        assert sub.running

        started = time.monotonic()
        sub.stop()
        assert time.monotonic() - started < 1.0 and not sub.running
        assert sub.figures().messages == f.messages     # still readable after stop
    finally:
        sub.stop()
        pub.close(linger=0)
        ctx.term()


def test_a_full_queue_drops_batches_and_never_blocks_the_caller(monkeypatch):
    import stagelens.engine_hooks.engine.vllm_face.kv_events_publisher as kv_events

    release = threading.Event()
    encode = kv_events.encode_batch

    def stalled(*args):
        release.wait(5)
        return encode(*args)

    monkeypatch.setattr(kv_events, "encode_batch", stalled)
    pub = KvEventsPublisher(TCP, max_queue=1)
    try:
        assert pub.publish([])                                   # taken by the sender, which stalls
        _until(lambda: pub._queue.empty(), what="the sender to take the first batch")
        assert pub.publish([])                                   # queued
        started = time.monotonic()
        assert pub.publish([]) is False and pub.dropped == 1     # dropped at once
        assert time.monotonic() - started < 0.1
        release.set()
        _until(lambda: pub.sent == 2, what="the queued batches")
    finally:
        release.set()
        pub.close()


def test_a_bad_endpoint_raises_at_start():
    with pytest.raises(zmq.ZMQError):
        KvEventsSubscriber("bogus://nowhere").start()


def test_live_blocks_are_bounded_and_the_dropped_counted():
    sub = KvEventsSubscriber("tcp://127.0.0.1:1", max_live_blocks=3)
    sub.handle([b"", (0).to_bytes(8, "big"), encode_batch(1.0, [BlockStored(tuple(range(5)), None, (), BS)])])
    f = sub.figures(0.0)
    assert (f.live_blocks, f.dropped_blocks, f.blocks_stored) == (3, 2, 5)
