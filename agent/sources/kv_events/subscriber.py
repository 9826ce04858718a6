"""vLLM's KV-cache events read from outside: block-level KV evidence from a ZMQ subscription.

vLLM started with `--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", ...}'`
(and the bundled engine with its vLLM face, kv_events_publisher.py) publishes one message per step
that changed its KV cache: `[topic, sequence number (8 bytes, big-endian), msgpack KVEventBatch]`.
The batch is `[ts, events, data_parallel_rank?]` (a map `{"ts", "events", "data_parallel_rank"}` is
read too). Each event is either a tagged array, `["BlockStored", block_hashes, parent_block_hash,
token_ids, block_size, lora_id, medium, lora_name, ...]`, fields by position (vLLM up to 0.2x), or a
map with its tag under `type` (later releases); both are read, event by event. Block hashes are ints
or bytes, as vLLM's releases have written them.

`KvEventsSubscriber` keeps the blocks alive now (hash -> when stored, each copy a store of the same
hash not yet removed; bounded in copies, however they spread over hashes: the oldest are dropped and
counted), and a history of what each batch did, so `figures(since)` says per window: blocks stored
and removed, clears, the lifetime of removed blocks (store to remove, on the publisher's clock),
blocks stored again within `restore_window_s` of their removal (recompute churn: the footprint of
preemption or eviction thrash), and the live block count; with totals since `start()` of messages,
malformed payloads, unknown event tags and batches lost to sequence gaps. Nothing in a message
raises: what cannot be read is counted. Reads are thread-safe; the socket lives on the subscriber's
own thread. A publisher controls every figure, so each removal costs O(1) under the lock (a hash
stored again holds its copies in a deque), a message is at most MAX_MESSAGE_BYTES (ZMQ drops a
larger one) and its arrays MAX_ARRAY_LEN long (a longer one is malformed), the lifetimes kept are
bounded like the history, and a sequence that jumps implausibly far (past MAX_SEQUENCE_GAP) is a new
numbering, not batches lost.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass

import msgpack
import zmq

log = logging.getLogger(__name__)

TAG_FIELD = "type"
# Each event's fields in vLLM's declaration order: a tagged array holds them after its tag. Newer
# fields come last, so an older (shorter) array simply lacks them.
EVENT_FIELDS = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                    "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
                    "kv_cache_spec_sliding_window"),
    "BlockRemoved": ("block_hashes", "medium", "group_idx"),
    "AllBlocksCleared": (),
}
RECV_TIMEOUT_MS = 100
# Live block copies kept (and removed blocks remembered for restores): ~135 bytes each, so a
# publisher filling them holds ~35 MiB (a million held 135 MiB, past the pod's limit beside the
# frame history). vLLM's KV cache is ~30,000 blocks of 16 for an 8B model on an 80 GB GPU; past the
# bound the oldest are dropped and counted.
MAX_LIVE_BLOCKS = 2**18
MAX_MESSAGE_BYTES = 16 * 2**20    # vLLM's batches are a step's events: kilobytes
MAX_SEQUENCE_GAP = 1_000_000      # KV-event batches: a day of a batch every 100 ms
# hashes (or events) in one array: a 1M-token prefill is 65,536 blocks of 16; 16 MiB of one-byte
# hashes would unpack into a 16M-long list held under the lock
MAX_ARRAY_LEN = 2**18
# the counters kept since start(): KvEventFigures' totals, and `totals`
TOTALS = ("messages", "malformed", "malformed_events", "unknown_events", "lost_batches",
          "sequence_resets", "unmatched_removals", "dropped_blocks")


@dataclass(frozen=True)
class KvEventFigures:
    """What the events said in a window (`window_s` long), and totals since the subscriber
    started."""
    window_s: float
    batches: int                    # batches received in the window
    blocks_stored: int
    blocks_removed: int
    clears: int                     # AllBlocksCleared events
    # of blocks removed in the window whose store was seen; None if none
    lifetime_mean_s: float | None
    lifetime_p50_s: float | None
    restored_blocks: int            # stored again within restore_window_s of their removal
    live_blocks: int                # stored and not removed, now
    # totals since start()
    messages: int
    malformed: int                  # messages whose frames or payload could not be read as a batch
    malformed_events: int           # events of a known tag whose fields could not be read
    unknown_events: int             # events with a tag this reader does not know
    lost_batches: int               # sequence numbers skipped
    # the sequence went back (the publisher restarted) or jumped implausibly far
    sequence_resets: int
    unmatched_removals: int         # removals of blocks whose store was not seen
    dropped_blocks: int             # live block copies forgotten to keep memory bounded


@dataclass(frozen=True)
class _BatchRecord:
    monotonic: float
    stored: int
    removed: int
    clears: int
    restored: int


class _Malformed(Exception):
    pass


class KvEventsSubscriber:
    def __init__(self, endpoint: str, topic: str = "", *, restore_window_s: float = 30.0,
                 max_live_blocks: int = MAX_LIVE_BLOCKS, max_history: int = 100_000) -> None:
        self.endpoint = endpoint
        self.topic = topic
        self.restore_window_s = restore_window_s
        self.max_live_blocks = max_live_blocks
        self._lock = threading.Lock()
        # block key -> publisher ts stored; a deque of them for a key stored again before its
        # removal (copies)
        self._live: OrderedDict = OrderedDict()
        self._live_count = 0
        # block key -> publisher ts removed, oldest first
        self._removed_at: OrderedDict = OrderedDict()
        self._history: deque[_BatchRecord] = deque(maxlen=max_history)
        # (monotonic, lifetime s)
        self._lifetimes: deque[tuple[float, float]] = deque(maxlen=max_history)
        self._last_seq: int | None = None
        self._started_at: float | None = None
        self._totals = dict.fromkeys(TOTALS, 0)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self, timeout: float = 5.0) -> None:
        """Connect (on the subscriber's own thread) and start reading; raises if the socket
        cannot connect."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._ready.clear()
        self._error = None
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="stagelens-kv-events-sub",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            self.stop()
            raise TimeoutError(f"kv-events subscriber: no socket after {timeout} s")
        if self._error is not None:
            error, self._thread = self._error, None
            raise error

    def stop(self, timeout: float = 2.0) -> None:
        """Stop reading and close the socket; returns within about RECV_TIMEOUT_MS."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> KvEventsSubscriber:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def last_sequence(self) -> int | None:
        """The sequence number of the last message read; None before the first."""
        with self._lock:
            return self._last_seq

    # --- reads (any thread) -----------------------------------------------------------------------
    @property
    def totals(self) -> dict[str, int]:
        """The counters since start() (TOTALS), a copy: what `figures()` gives without reading
        the history."""
        with self._lock:
            return dict(self._totals)

    def figures(self, since_monotonic: float | None = None) -> KvEventFigures:
        """The window from `since_monotonic` (time.monotonic(); None: since start()) to now."""
        now = time.monotonic()
        with self._lock:
            since = since_monotonic if since_monotonic is not None else (self._started_at or now)
            records = _newest(self._history, since, lambda r: r.monotonic)
            lifetimes = [t for _, t in _newest(self._lifetimes, since, lambda pair: pair[0])]
            return KvEventFigures(
                window_s=max(now - since, 0.0),
                batches=len(records),
                blocks_stored=sum(r.stored for r in records),
                blocks_removed=sum(r.removed for r in records),
                clears=sum(r.clears for r in records),
                lifetime_mean_s=statistics.fmean(lifetimes) if lifetimes else None,
                lifetime_p50_s=statistics.median(lifetimes) if lifetimes else None,
                restored_blocks=sum(r.restored for r in records),
                live_blocks=self._live_count,
                **self._totals,
            )

    # --- the reading thread -----------------------------------------------------------------------
    def _loop(self) -> None:
        ctx = zmq.Context()
        sock = None
        try:
            sock = ctx.socket(zmq.SUB)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVTIMEO, RECV_TIMEOUT_MS)
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
            sock.setsockopt(zmq.SUBSCRIBE, self.topic.encode("utf-8"))
            sock.connect(self.endpoint)
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            if sock is not None:
                sock.close(linger=0)
            ctx.term()
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                try:
                    frames = sock.recv_multipart()
                except zmq.Again:
                    continue
                self.handle(frames)
        except Exception:
            log.exception("kv-events subscriber: the reading thread failed; no more events are read")
        finally:
            sock.close(linger=0)
            ctx.term()

    def handle(self, frames, now_monotonic: float | None = None) -> None:
        """Take in one message's frames (the reading thread calls this; so may a test)."""
        now = time.monotonic() if now_monotonic is None else now_monotonic
        with self._lock:
            self._totals["messages"] += 1
            try:
                if len(frames) != 3 or len(frames[1]) != 8:
                    raise _Malformed(f"{len(frames)} frames")
                self._track_sequence(int.from_bytes(frames[1], "big"))
                ts, events = _read_batch(frames[2])
                self._apply(ts, events, now)
            except _Malformed:
                self._totals["malformed"] += 1
            # a reader bug is counted as the message it could not read, never raised
            except Exception:
                self._totals["malformed"] += 1
                log.debug("kv-events subscriber: could not read a message", exc_info=True)

    # --- internals (under the lock) ---------------------------------------------------------------
    def _track_sequence(self, seq: int) -> None:
        last = self._last_seq
        if last is not None:
            if seq <= last or sequence_gap_is_new_numbering(last, seq):
                self._totals["sequence_resets"] += 1
            elif seq > last + 1:
                self._totals["lost_batches"] += seq - last - 1
        self._last_seq = seq

    def _apply(self, ts: float, events: list, now: float) -> None:
        stored = removed = clears = restored = 0
        for raw in events:
            decoded = _read_event(raw)
            if decoded is None:
                self._totals["unknown_events"] += 1
                continue
            tag, ev = decoded
            try:
                if tag == "AllBlocksCleared":
                    clears += 1
                    self._live.clear()
                    self._live_count = 0
                    continue
                keys = _block_keys(ev)
            except _Malformed:
                self._totals["malformed_events"] += 1
                continue
            if tag == "BlockStored":
                for key in keys:
                    stored += 1
                    removed_at = self._removed_at.pop(key, None)
                    if removed_at is not None and ts - removed_at <= self.restore_window_s:
                        restored += 1
                    self._add_copy(key, ts)
                    self._live_count += 1
                    if self._live_count > self.max_live_blocks:
                        self._drop_oldest_copy()
            else:   # BlockRemoved
                for key in keys:
                    removed += 1
                    stored_at = self._take_oldest_copy(key)
                    if stored_at is not None:
                        self._lifetimes.append((now, max(ts - stored_at, 0.0)))
                        self._live_count -= 1
                    else:
                        self._totals["unmatched_removals"] += 1
                    self._removed_at[key] = ts
                    self._removed_at.move_to_end(key)
                self._prune_removed(ts)
        self._history.append(_BatchRecord(now, stored, removed, clears, restored))

    def _drop_oldest_copy(self) -> None:
        """Forget the oldest copy of the least recently stored block (O(1)): the cap holds for
        repeats too."""
        self._take_oldest_copy(next(iter(self._live)))
        self._live_count -= 1
        self._totals["dropped_blocks"] += 1

    def _add_copy(self, key, ts: float) -> None:
        """One more copy of `key`: its time alone for the first (a deque costs ~600 bytes: a
        million blocks would hold 600 MB), a deque from the second on; the key becomes the most
        recently stored."""
        held = self._live.get(key)
        if held is None:
            self._live[key] = ts
            return
        self._live.move_to_end(key)
        if isinstance(held, deque):
            held.append(ts)
        else:
            self._live[key] = deque((held, ts))

    def _take_oldest_copy(self, key) -> float | None:
        """The time the oldest copy of `key` was stored, that copy forgotten (O(1)); None when
        none is live."""
        held = self._live.get(key)
        if held is None:
            return None
        if not isinstance(held, deque):
            del self._live[key]
            return held
        oldest = held.popleft()
        if len(held) == 1:
            self._live[key] = held[0]      # in place: the key keeps its position
        return oldest

    def _prune_removed(self, ts: float) -> None:
        horizon = ts - self.restore_window_s
        removed = self._removed_at
        while removed and (len(removed) > self.max_live_blocks or next(iter(removed.values())) < horizon):
            removed.popitem(last=False)


def _newest(records: deque, since: float, at) -> list:
    """The records (kept oldest first) from `since` on, read from the newest end: a window costs
    its own size."""
    out = []
    for record in reversed(records):
        if at(record) < since:
            break
        out.append(record)
    out.reverse()
    return out


def _read_batch(payload: bytes) -> tuple[float, list]:
    try:
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False,
                                max_array_len=MAX_ARRAY_LEN)
    except Exception as exc:
        raise _Malformed("not msgpack") from exc
    if isinstance(batch, list | tuple) and len(batch) >= 2:
        ts, events = batch[0], batch[1]
    elif isinstance(batch, dict) and "events" in batch:
        ts, events = batch.get("ts"), batch["events"]
    else:
        raise _Malformed("not a KVEventBatch")
    if not isinstance(events, list | tuple):
        raise _Malformed("events is not a list")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        ts = time.time()
    return float(ts), list(events)


def _read_event(raw) -> tuple[str, dict] | None:
    """(tag, fields by name) from an array- or map-tagged event; None for an unknown tag or
    shape."""
    if isinstance(raw, list | tuple) and raw and isinstance(raw[0], str):
        names = EVENT_FIELDS.get(raw[0])
        return None if names is None else (raw[0], dict(zip(names, raw[1:], strict=False)))
    if isinstance(raw, dict) and isinstance(raw.get(TAG_FIELD), str):
        return (raw[TAG_FIELD], raw) if raw[TAG_FIELD] in EVENT_FIELDS else None
    return None


def _block_keys(ev: dict) -> list:
    """The event's block keys: each hash (int or bytes), with its KV-cache group when that is not
    0."""
    hashes = ev.get("block_hashes")
    if not isinstance(hashes, list | tuple):
        raise _Malformed("block_hashes is not a list")
    group = ev.get("group_idx")
    if group is not None and (isinstance(group, bool) or not isinstance(group, int)):
        raise _Malformed("group_idx is not an int")
    keys = []
    for h in hashes:
        if isinstance(h, bool) or not isinstance(h, int | bytes | str):
            raise _Malformed("a block hash is neither an int nor bytes")
        keys.append((group, h) if group else h)
    return keys


__all__ = ["EVENT_FIELDS", "TOTALS", "KvEventFigures", "KvEventsSubscriber"]


def sequence_gap_is_new_numbering(last: int, seq: int) -> bool:
    """A KV-event sequence number that jumps ahead past MAX_SEQUENCE_GAP: the publisher numbered
    anew."""
    return seq - last - 1 > MAX_SEQUENCE_GAP
