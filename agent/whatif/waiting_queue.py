"""The simulator's waiting requests, kept in the scheduler's policy order
(engine_hooks/engine/scheduler.py `_in_policy_order`) instead of sorted again at every step: under
overload tens of thousands wait, and a step admits a few.

The engine's order is a stable sort of its waiting deque (arrivals at the back, preempted requests
at the front): `fcfs` the deque's order; `short-first` by tokens to compute, then arrival;
`length-bucket` by distance of the prompt's bucket (a power of two) from the running batch's median
bucket, then arrival. A request's place in the deque is its `seq` (counting up at the back, down at
the front), so the stable sort is a sort on the key with `seq` last. A waiting request's key does
not change while it waits (it holds no computed token), so each lane, one per model (and per bucket
under length-bucket), is a heap on that key, and one pass merges the lanes' heads: O(log n) for each
request a step admits, O(lanes) for the rest.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Container, Iterator


class WaitingQueue:
    def __init__(self, policy: str) -> None:
        self.policy = policy
        # (model, bucket or 0) -> heap of (*key, req)
        self._lanes: dict[tuple[str, int], list[tuple]] = {}
        self._per_model: Counter[str] = Counter()
        self._size = 0
        # the seq of the next request queued at the back, at the front
        self._back, self._front = 0, -1
        # length-bucket only: (seq, req), the taken left in
        self._by_seq: list[tuple[int, object]] = []

    def __len__(self) -> int:
        return self._size

    def append(self, req) -> None:
        """At the back: an arrival."""
        self._push(req, self._back)
        self._back += 1

    def appendleft(self, req) -> None:
        """At the front: a preempted request."""
        self._push(req, self._front)
        self._front -= 1

    def _push(self, req, seq: int) -> None:
        req.seq = seq
        if self.policy == "short-first":
            entry = (req.to_compute, req.arrival, seq, req)
        elif self.policy == "length-bucket":
            entry = (req.arrival, seq, req)
            heapq.heappush(self._by_seq, (seq, req))
        else:
            entry = (seq, req)
        heapq.heappush(self._lanes.setdefault(self._lane(req), []), entry)
        self._per_model[req.model] += 1
        self._size += 1

    def _lane(self, req) -> tuple[str, int]:
        return req.model, req.bucket if self.policy == "length-bucket" else 0

    def take(self, req) -> None:
        """Remove `req`, the request `in_order` gave last (the head of its lane)."""
        lane_key = self._lane(req)
        lane = self._lanes[lane_key]
        if lane[0][-1] is not req:
            raise ValueError(f"{req.rid} is not the next request of its lane")
        heapq.heappop(lane)
        if not lane:
            del self._lanes[lane_key]
        self._per_model[req.model] -= 1
        if not self._per_model[req.model]:
            del self._per_model[req.model]
        self._size -= 1
        req.seq = None

    def in_order(self, running: list) -> Iterator:
        """The waiting requests in policy order, for one pass of the scheduler, which takes
        (`take`) each request it admits or stops. A request it leaves ends its lane's part in the
        pass: the scheduler leaves only one whose model is not resident, and every later request
        of that model would be left the same way."""
        if len(self._lanes) == 1 and self.policy != "length-bucket":
            yield from _one_lane(next(iter(self._lanes.values())))
            return
        target = self._target_bucket(running)
        merge = [(_rank(key, target), lane[0][:-1], key) for key, lane in self._lanes.items()]
        heapq.heapify(merge)
        while merge:
            _, _, key = heapq.heappop(merge)
            req = self._lanes[key][0][-1]
            yield req
            lane = self._lanes.get(key)
            if req.seq is None and lane:        # taken: its lane's next request
                heapq.heappush(merge, (_rank(key, target), lane[0][:-1], key))

    def _target_bucket(self, running: list) -> int | None:
        """length-bucket: the median bucket of the running batch, or the bucket of the front of
        the deque."""
        if self.policy != "length-bucket":
            return None
        if running:
            return sorted(r.bucket for r in running)[len(running) // 2]
        by_seq = self._by_seq
        # taken since (or queued again under another seq)
        while by_seq and by_seq[0][1].seq != by_seq[0][0]:
            heapq.heappop(by_seq)
        return by_seq[0][1].bucket if by_seq else None

    def waiting_not_in(self, resident: Container[str]) -> int:
        """How many wait for a model that is not resident."""
        return sum(n for model, n in self._per_model.items() if model not in resident)


def _one_lane(lane: list[tuple]):
    """`in_order` over one lane (one model served): its heap's heads, while the scheduler takes
    them."""
    while lane:
        req = lane[0][-1]
        yield req
        if req.seq is not None:
            return


def _rank(lane_key: tuple[str, int], target: int | None) -> int:
    """Where a lane's requests go under length-bucket: its bucket's distance from the target."""
    return abs(lane_key[1] - target) if target is not None else 0
