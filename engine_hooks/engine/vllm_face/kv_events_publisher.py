"""vLLM's block-level KV-cache events, published by the bundled engine in vLLM's own wire format.

vLLM started with `--kv-events-config` publishes, on a ZMQ PUB socket, one message per engine step
that changed the KV cache: three frames, `[topic, sequence number (8 bytes, big-endian, from 0),
payload]`, the payload a msgpack `KVEventBatch` `[ts, events, data_parallel_rank]` (the rank left
out when it is None). Its events are `BlockStored` (`block_hashes`, `parent_block_hash`, `token_ids`
of those blocks one after the other, `block_size`, `lora_id`, `medium`, `lora_name`), `BlockRemoved`
(`block_hashes`, `medium`) and `AllBlocksCleared`. Up to vLLM 0.2x each event is a tagged array,
`["BlockStored", block_hashes, ...]`, its fields by position (`encoding="array"`); later releases
write each event as a map whose `type` key holds the tag, `{"type": "BlockStored", "block_hashes":
[...], ...}` (`encoding="map"`), the batch around them still an array.
agent/sources/kv_events/subscriber.py reads both.

`KvEventsPublisher` is an engine observer (`LLMEngine.add_observer`): after each step it diffs the
allocator's block tables against the previous step. A block whose `block_size` token slots have all
been computed is stored, its hash chained from its parent's and its own token ids (and the model, as
vLLM's extra keys carry the LoRA); the blocks of a request that lost its table (it finished, failed
or was preempted) are removed; a rebuilt allocator, `clear()` and `close()` clear everything. The
engine thread only diffs and queues; a background thread encodes and sends, and a full queue drops
the batch (counted in `dropped`), never blocking a step. The engine is read by duck typing: this
module imports neither torch nor the engine.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import struct
import threading
import time
from dataclasses import astuple, dataclass, fields, is_dataclass

import msgpack
import zmq

log = logging.getLogger(__name__)

ENCODINGS = ("array", "map")
MEDIUM_GPU = "GPU"
TAG_FIELD = "type"      # msgspec's default tag field: where a map-encoded event carries its tag
_STOP = object()


@dataclass(frozen=True)
class BlockStored:
    block_hashes: tuple
    parent_block_hash: int | bytes | None
    token_ids: tuple
    block_size: int
    lora_id: int | None = None
    medium: str | None = MEDIUM_GPU
    lora_name: str | None = None


@dataclass(frozen=True)
class BlockRemoved:
    block_hashes: tuple
    medium: str | None = MEDIUM_GPU


@dataclass(frozen=True)
class AllBlocksCleared:
    pass


def block_hash(parent: int | None, token_ids, extra: str | None = None) -> int:
    """A block's 64-bit hash, chained: the parent's hash, the block's token ids and `extra` (the
    model)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(b"\x00" if parent is None else b"\x01" + parent.to_bytes(8, "big"))
    h.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    if extra is not None:
        h.update(b"\x02" + extra.encode("utf-8"))
    return int.from_bytes(h.digest(), "big")


def encode_event(event, encoding: str = "array"):
    """One event as vLLM writes it: `[tag, field, ...]` (array) or `{"type": tag, field: value}`
    (map). Anything but one of the event classes here (a list, a dict: an event already in wire
    form) goes as it is."""
    if not is_dataclass(event):
        return event
    tag = type(event).__name__
    if encoding == "array":
        return [tag, *(list(v) if isinstance(v, tuple) else v for v in astuple(event))]
    out = {TAG_FIELD: tag}
    for f in fields(event):
        value = getattr(event, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def encode_batch(ts: float, events, data_parallel_rank: int | None = None, encoding: str = "array") -> bytes:
    """A KVEventBatch's msgpack payload: `[ts, [event, ...]]`, then the rank unless it is None."""
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    batch = [float(ts), [encode_event(e, encoding) for e in events]]
    if data_parallel_rank is not None:
        batch.append(data_parallel_rank)
    return msgpack.packb(batch, use_bin_type=True)


class KvEventsPublisher:
    """Publishes an engine's KV block events on a ZMQ PUB socket bound to `endpoint`
    (`tcp://H:P`, `tcp://127.0.0.1:*` for any free port, `ipc://PATH`); `endpoint` afterwards
    says where it is bound. With `engine` it observes that engine at once; else add it with
    `engine.add_observer(publisher)`."""

    def __init__(self, endpoint: str, engine=None, topic: str = "kv-events",
                 encoding: str = "array", *, data_parallel_rank: int | None = 0,
                 max_queue: int = 10_000, hwm: int = 100_000, linger_ms: int = 500,
                 clear_on_close: bool = True) -> None:
        if encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
        self.encoding = encoding
        self.topic = topic
        self.data_parallel_rank = data_parallel_rank
        self.clear_on_close = clear_on_close
        self._topic = topic.encode("utf-8")
        self._linger_ms = linger_ms
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PUB)
        try:
            self._sock.setsockopt(zmq.SNDHWM, hwm)
            self._sock.setsockopt(zmq.LINGER, linger_ms)
            self._sock.bind(endpoint)
            self.endpoint = self._sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        except BaseException:
            self._sock.close(linger=0)
            self._ctx.term()
            raise
        # Counters: read from any thread.
        self.batches = 0        # batches queued
        self.sent = 0           # batches sent
        self.dropped = 0        # batches dropped because the queue was full
        self.send_errors = 0
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        # tracking state: the engine thread against clear() and close()
        self._lock = threading.Lock()
        # request -> [(block id, hash)] stored, in order
        self._tracked: dict[str, list[tuple[int, int]]] = {}
        self._pending: list = []          # events from request ends, sent with the next step's
        self._allocator = None
        self._closed = False
        self._thread = threading.Thread(target=self._send_loop, name="stagelens-kv-events",
                                        daemon=True)
        self._thread.start()
        self._engine = engine
        if engine is not None:
            engine.add_observer(self)

    # --- the engine's observer seam (engine thread) -----------------------------------------------
    def on_step(self, engine, stats=None, batch=None) -> None:
        with self._lock:
            if self._closed:
                return
            events, self._pending = self._pending, []
            allocator = engine.allocator
            if self._allocator is not None and allocator is not self._allocator:
                # the KV cache was rebuilt: nothing of the old one survives
                self._tracked.clear()
                events.append(AllBlocksCleared())
            self._allocator = allocator
            events.extend(self._diff(engine))
            self._enqueue(events)

    def on_request_end(self, engine, request) -> None:
        """A request ended, its blocks already returned: blocks it filled in its last step are
        stored (so a one-step request is seen), then all of them removed. They go out with the
        next step's events."""
        with self._lock:
            if self._closed:
                return
            tracked = self._tracked.pop(request.request_id, [])
            bs = engine.allocator.block_size
            full = min(request.num_computed_tokens, request.num_tokens) // bs
            hashes = [h for _, h in tracked]
            stored = self._store(engine, request, hashes[-1] if hashes else None, len(hashes), full,
                                 bs, hashes)
            if stored is not None:
                self._pending.append(stored)
            if hashes:
                self._pending.append(BlockRemoved(tuple(hashes)))

    # --- the rest of the API (any thread) ---------------------------------------------------------
    def publish(self, events) -> bool:
        """Queue one batch of events as they are (an empty list makes a probe); False if it was
        dropped."""
        with self._lock:
            if self._closed:
                return False
            return self._enqueue(list(events), allow_empty=True)

    def clear(self) -> None:
        """The engine's KV cache was reset: every block is gone (AllBlocksCleared)."""
        with self._lock:
            if self._closed:
                return
            self._tracked.clear()
            events, self._pending = [*self._pending, AllBlocksCleared()], []
            self._enqueue(events)

    def close(self, timeout: float = 5.0) -> None:
        """Stop observing, send what is queued (and AllBlocksCleared), stop the thread, close the
        socket."""
        if self._engine is not None:
            self._engine.remove_observer(self)
        with self._lock:
            if self._closed:
                return
            events, self._pending = self._pending, []
            if self.clear_on_close:
                events.append(AllBlocksCleared())
            self._tracked.clear()
            self._enqueue(events)
            self._closed = True
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            log.warning("kv-events publisher: queue still full after %s s; closing without sending it", timeout)
        self._thread.join(timeout + self._linger_ms / 1000)
        if self._thread.is_alive():
            log.warning("kv-events publisher: sender thread did not stop; abandoning its socket")
            self._ctx.destroy(linger=0)
        else:
            self._ctx.term()

    def __enter__(self) -> KvEventsPublisher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- internals --------------------------------------------------------------------------------
    def _enqueue(self, events: list, allow_empty: bool = False) -> bool:
        if not events and not allow_empty:
            return True
        try:
            self._queue.put_nowait((time.time(), events))
        except queue.Full:
            self.dropped += 1
            return False
        self.batches += 1
        return True

    def _diff(self, engine) -> list:
        owners = engine.allocator.owners()
        bs = engine.allocator.block_size
        requests = {r.request_id: r for r in engine.scheduler.requests()}
        removed: list = []
        for rid in [rid for rid in self._tracked if rid not in owners]:
            removed.extend(h for _, h in self._tracked.pop(rid))
        stored: list = []
        for rid, table in owners.items():
            prev = self._tracked.get(rid, [])
            req = requests.get(rid)
            full = 0 if req is None else min(req.num_computed_tokens // bs, len(table))
            keep = 0    # blocks still this request's, at the same position, still full
            while keep < len(prev) and keep < full and prev[keep][0] == table[keep]:
                keep += 1
            if keep < len(prev):
                removed.extend(h for _, h in prev[keep:])
                del prev[keep:]
            hashes = [h for _, h in prev]
            event = self._store(engine, req, hashes[-1] if hashes else None, keep, full, bs, hashes)
            if event is not None:
                stored.append(event)
                prev.extend(zip(table[keep:full], event.block_hashes, strict=True))
            if prev:
                self._tracked[rid] = prev
            else:
                self._tracked.pop(rid, None)
        # Within a step, blocks are freed (finish, preemption) before new ones fill.
        return ([BlockRemoved(tuple(removed))] if removed else []) + stored

    def _store(self, engine, req, parent, start: int, end: int, bs: int, chain: list) -> BlockStored | None:
        """BlockStored for the request's blocks [start, end), hashes chained from `parent`."""
        if req is None or end <= start:
            return None
        lora_id, lora_name = _lora(engine, req.model)
        first_parent, hashes, tokens = parent, [], []
        for i in range(start, end):
            block_tokens = req.token_ids(i * bs, (i + 1) * bs)
            parent = block_hash(parent, block_tokens, req.model)
            hashes.append(parent)
            tokens.extend(block_tokens)
        chain.extend(hashes)
        return BlockStored(tuple(hashes), first_parent, tuple(tokens), bs, lora_id, MEDIUM_GPU,
                           lora_name)

    def _send_loop(self) -> None:
        seq = 0
        try:
            while True:
                item = self._queue.get()
                if item is _STOP:
                    return
                ts, events = item
                try:
                    payload = encode_batch(ts, events, self.data_parallel_rank, self.encoding)
                    self._sock.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
                except Exception:
                    self.send_errors += 1
                    if self.send_errors == 1:
                        log.exception("kv-events publisher: a batch could not be sent (further failures counted)")
                    continue
                seq += 1
                self.sent += 1
        finally:
            self._sock.close()


def _lora(engine, model: str) -> tuple[int | None, str | None]:
    """The engine's first model is the base model (no LoRA); the others get their index as an id."""
    names = list(getattr(engine, "model_names", ()))
    if model not in names or names.index(model) == 0:
        return None, None
    return names.index(model), model


__all__ = ["ENCODINGS", "AllBlocksCleared", "BlockRemoved", "BlockStored", "KvEventsPublisher",
           "block_hash", "encode_batch", "encode_event"]
