"""The flight recorder: what the hooks saw, in bounded rings, and the engine snapshot built from it.

The `on_*` methods run on the engine's threads inside the hook guard; `snapshot()` and the
`recent_*` readers run on any thread. One lock covers the shared state; the engine holds it for
microseconds per step.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from itertools import takewhile

from stagelens.engine_hooks.engine.request import FinishReason, Request, Status
from stagelens.engine_hooks.engine.scheduler import ScheduledBatch
from stagelens.engine_hooks.hooks.access import AccessStats, access_stats
from stagelens.engine_hooks.hooks.ring import Ring
from stagelens.engine_hooks.hooks.window import WindowRecords, WindowSettings, window_stats
from stagelens.engine_hooks.records.attribution import SlowStep, components
from stagelens.engine_hooks.records.snapshot import (
    WINDOW_S,
    Clock,
    Counters,
    Dropped,
    EngineInfo,
    EngineSnapshot,
    Health,
    KvUsage,
    Window,
)
from stagelens.engine_hooks.records.timeline import BEHIND_LONG_PREFILL, PrefillChunk, RequestTimeline, WaitTracker
from stagelens.engine_hooks.records.waits import MODEL_LOADING, NO_FREE_BLOCKS, TOKEN_BUDGET


@dataclass
class RecorderConfig:
    window_s: float = WINDOW_S        # the window of the derived figures in a snapshot
    # a prefill step larger than this blocks the requests behind it
    long_prefill_tokens: int = 512
    steps_capacity: int = 4096
    timelines_capacity: int = 2048
    events_capacity: int = 1024
    # how often the allocator's full account is taken (engine thread)
    usage_interval_s: float = 0.25
    # "preempted or refused with free memory": at least this share free
    free_memory_share: float = 0.10
    # measure dense attention's read bandwidth, the reference for paged
    calibrate: bool = True
    lengths_sample: int = 256         # recent sequence lengths kept for block-size advice


class Recorder:
    def __init__(self, engine, config: RecorderConfig | None = None) -> None:
        self.engine = engine
        self.config = config or RecorderConfig()
        c = self.config
        self.steps: Ring[dict] = Ring(c.steps_capacity)
        self.timelines: Ring[RequestTimeline] = Ring(c.timelines_capacity)
        self.events: Ring[dict] = Ring(c.events_capacity)
        self.loads: Ring[dict] = Ring(256)
        self.counters: Counter[str] = Counter()
        self.wait_seconds: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self._active: dict[str, tuple[Request, RequestTimeline]] = {}
        # submitted, not yet seen by the scheduler (queued behind a step)
        self._arrived: dict[str, Request] = {}
        self._in_step = False
        self._waits = WaitTracker()
        # model -> (load start, serving when it started)
        self._loading: dict[str, tuple[float, bool]] = {}
        self._last_load_end = 0.0
        # a decode step with no load beside it (moving mean)
        self._usual_decode_s: float | None = None
        # decode steps beside a load
        self._slow_steps: deque[SlowStep] = deque(maxlen=c.steps_capacity)
        self._step_index = 0
        self._last_step_end: float | None = None
        # index, end, long prefill
        self._previous_step: tuple[int, float, str | None] | None = None
        self._step_long_prefill: str | None = None
        self._step_chunks: list[tuple[RequestTimeline, int]] = []
        self._step_waiting_on_model = 0
        self._step_prefill_pairs = 0
        self._step_forwards = 0
        self._step_access = AccessStats()
        self._step_attention_s = 0.0
        self._step_h2d = 0
        self._usage = None
        self._usage_at = 0.0
        self._cuda_events: list = []
        cache = engine.kv_cache
        self._token_bytes = cache.bytes_per_token
        self._block_size = cache.block_size
        # engine_hooks.hooks.calibrate.ideal_layout_curve
        self.attention_reference: dict | None = None
        self._window_settings = WindowSettings(self._block_size, engine.config.preset.num_layers,
                                               c.long_prefill_tokens, c.lengths_sample)

    # --- step boundaries --------------------------------------------------------------------------
    def on_arrival(self, req: Request) -> None:
        """A request queued (any thread): it waits from now, though the scheduler sees it only at
        its next step."""
        with self._lock:
            self._arrived[req.request_id] = req

    def on_step_start(self) -> None:
        self._in_step = True
        self._step_index += 1
        self._step_access = AccessStats()
        self._step_attention_s = 0.0
        self._step_h2d = 0
        self._step_chunks = []
        self._step_long_prefill = None
        self._step_prefill_pairs = 0
        self._step_forwards = 0

    def on_step_end(self, stats) -> None:
        self._resolve_cuda_events()
        now = stats.end
        loading = bool(self._loading) or self._last_load_end > stats.start
        engine = self.engine
        # the last account before a pause must be true
        idle = not stats.num_running and not stats.num_waiting
        if idle or now - self._usage_at >= self.config.usage_interval_s:
            self._usage, self._usage_at = engine.allocator.usage(), now
        a = self._step_access
        record = {
            "index": self._step_index, "start": stats.start, "end": now,
            "idle_before_s": stats.start - self._last_step_end if self._last_step_end is not None else 0.0,
            "schedule_s": stats.schedule_s, "prepare_s": stats.prepare_s, "forward_s": stats.forward_s,
            "sample_s": stats.sample_s, "update_s": stats.update_s,
            "token_budget": stats.token_budget, "tokens": stats.num_scheduled_tokens,
            "prefill_tokens": stats.num_prefill_tokens, "decode_tokens": stats.num_decode_tokens,
            "prefill_seqs": stats.num_prefill_seqs, "decode_seqs": stats.num_decode_seqs,
            "waiting": stats.num_waiting, "running": stats.num_running, "preempted": stats.num_preempted,
            "waiting_on_model": self._step_waiting_on_model, "long_prefill": self._step_long_prefill,
            "loading": loading, "kv_slots_reserved": stats.kv_slots_reserved,
            "kv_tokens_cached": stats.kv_tokens_cached, "attention_s": self._step_attention_s,
            "kv_useful_bytes": a.useful_bytes, "kv_moved_bytes": a.moved_bytes, "kv_gathered_bytes": a.gathered_bytes,
            "kv_block_runs": a.block_runs, "kv_sequences": a.sequences, "h2d_bytes": self._step_h2d,
            # what a prefill's attention costs grows with its tokens times its context (what-if's
            # step cost)
            "prefill_pairs": self._step_prefill_pairs, "forwards": self._step_forwards,
        }
        with self._lock:
            self.steps.append(record)
            for timeline, tokens in self._step_chunks:
                timeline.chunks.append(PrefillChunk(stats.start, now, tokens, self._step_index))
            for rid in stats.finished:
                self._finish(rid)
            c = self.counters
            c["steps_total"] += 1
            c["busy_seconds_total"] += now - stats.start
            c["idle_seconds_total"] += record["idle_before_s"]
            c["tokens_scheduled_total"] += stats.num_scheduled_tokens
            c["kv_useful_bytes_total"] += a.useful_bytes
            c["kv_moved_bytes_total"] += a.moved_bytes
            c["kv_gathered_bytes_total"] += a.gathered_bytes
            c["attention_seconds_total"] += self._step_attention_s
            c["h2d_bytes_total"] += self._step_h2d
        self._note_decode_step(stats, loading)
        self._last_step_end = now
        self._previous_step = (self._step_index, now, self._step_long_prefill)
        self._in_step = False

    def _note_decode_step(self, stats, loading: bool) -> None:
        """Learn what a decode step usually takes; keep what one beside a model load took beyond
        it."""
        if not stats.num_decode_tokens or stats.num_prefill_tokens:
            return
        duration = stats.end - stats.start
        if not loading:
            usual = self._usual_decode_s
            self._usual_decode_s = duration if usual is None else 0.9 * usual + 0.1 * duration
        elif self._usual_decode_s is not None:
            self._slow_steps.append(SlowStep(stats.start, stats.end,
                                             max(0.0, duration - self._usual_decode_s)))

    def _finish(self, rid: str) -> None:
        entry = self._active.pop(rid, None)
        if entry is None:
            return
        req, timeline = entry
        self._fill_from_request(timeline, req)
        self._attribute(timeline)
        failed = req.finish_reason in FinishReason.FAILED
        left_waiting = len(req.events) >= 2 and req.events[-2][1] in ("arrival", "preempted")
        if failed and left_waiting and timeline.finished is not None:
            # cancelled or overdue in the queue: that wait counts
            self._charge(req, timeline, timeline.finished)
        self._waits.scheduled(rid)
        self.timelines.append(timeline)
        self.counters["requests_failed_total" if failed else "requests_finished_total"] += 1

    def _attribute(self, timeline: RequestTimeline) -> None:
        """Split its TTFT and latency into components (engine_hooks.records.attribution)."""
        slow = list(takewhile(lambda s: s.end > timeline.arrival, reversed(self._slow_steps)))
        if timeline.first_token is not None:
            timeline.ttft_components = components(timeline, timeline.first_token, slow)
        if timeline.finished is not None:
            timeline.latency_components = components(timeline, timeline.finished, slow)

    def _charge(self, req: Request, timeline: RequestTimeline, now: float) -> None:
        charged = self._waits.charge(timeline, now, self._previous_step,
                                     preempted=req.num_preemptions > 0)
        if charged is not None:
            self.wait_seconds[charged[0]] += charged[1]

    @staticmethod
    def _fill_from_request(timeline: RequestTimeline, req: Request) -> None:
        timeline.events = list(req.events)
        timeline.output_tokens = len(req.output_token_ids)
        timeline.preemptions = req.num_preemptions
        timeline.finish_reason = req.finish_reason
        timeline.first_token = req.first_event_time("first_token")
        timeline.finished = req.first_event_time("finished")

    # --- scheduling -------------------------------------------------------------------------------
    def before_schedule(self) -> list[Request]:
        return list(self.engine.scheduler.waiting)

    def on_schedule(self, waiting_before: list[Request], batch: ScheduledBatch, now: float) -> None:
        long_limit = self.config.long_prefill_tokens
        with self._lock:
            for req in waiting_before:
                self._charge(req, self._timeline(req), now)
            longest = None
            for req, n in batch.entries:
                timeline = self._timeline(req)
                self._waits.scheduled(req.request_id)
                if n > 1 or req.num_computed_tokens < req.num_prompt_tokens:
                    self._step_chunks.append((timeline, n))
                    self._step_prefill_pairs += n * (req.num_computed_tokens + n)
                    if n > long_limit and (longest is None or n > longest[1]):
                        longest = (req.request_id, n)
            self._step_long_prefill = longest[0] if longest else None
            self._step_forwards = len({req.model for req, _ in batch.entries})
            on_model = 0
            for req in self.engine.scheduler.waiting:
                reason = batch.waiting_reasons.get(req.request_id)
                if reason is None:
                    continue
                on_model += reason == MODEL_LOADING
                if reason == TOKEN_BUDGET and longest is not None and req.num_prompt_tokens <= long_limit:
                    self._waits.decide(req.request_id, BEHIND_LONG_PREFILL, self._step_index,
                                       longest[0])
                else:
                    self._waits.decide(req.request_id, reason)
            self._step_waiting_on_model = on_model

    def _timeline(self, req: Request) -> RequestTimeline:
        entry = self._active.get(req.request_id)
        if entry is None:
            timeline = RequestTimeline(req.request_id, req.model, req.num_prompt_tokens,
                                       arrival=req.arrival_time)
            self._active[req.request_id] = (req, timeline)
            self._arrived.pop(req.request_id, None)
            return timeline
        return entry[1]

    def on_preempt(self, req: Request, free_blocks: int, now: float) -> None:
        total = self.engine.allocator.num_blocks
        free_share = free_blocks / total if total else 0.0
        with self._lock:
            self._waits.requeued(req.request_id, now)
            self.counters["preemptions_total"] += 1
            if free_share >= self.config.free_memory_share:
                self.counters["preemptions_with_free_memory_total"] += 1
            self.events.append({"t": now, "event": "preempted", "request_id": req.request_id,
                                "reason": NO_FREE_BLOCKS, "kv_free_blocks": free_blocks,
                                "kv_free_ratio": free_share, "computed_tokens_lost": req.num_tokens,
                                "step": self._step_index})

    def on_allocation_failure(self, free_blocks: int) -> None:
        total = self.engine.allocator.num_blocks
        with self._lock:
            self.counters["allocation_failures_total"] += 1
            if total and free_blocks / total >= self.config.free_memory_share:
                self.counters["allocation_failures_with_free_memory_total"] += 1

    # --- the forward pass -------------------------------------------------------------------------
    def on_forward(self, inputs) -> None:
        self._step_access.add(access_stats(inputs.attention, self._block_size, self._token_bytes))
        if self.engine.device.type != "cpu":
            self._step_h2d += inputs.host_to_device_bytes

    def on_attention_time(self, seconds: float) -> None:
        self._step_attention_s += seconds

    def on_attention_events(self, start, end) -> None:
        self._cuda_events.append((start, end))

    def _resolve_cuda_events(self) -> None:
        # The step synchronised the device, so every event of this step has completed.
        if self._cuda_events:
            self._step_attention_s += sum(s.elapsed_time(e) for s, e in self._cuda_events) / 1000
            self._cuda_events.clear()

    # --- the cold path ----------------------------------------------------------------------------
    def on_load_start(self, model: str, now: float) -> None:
        serving = bool(self.engine.scheduler.running)
        with self._lock:
            self._loading[model] = (now, serving)
            self.events.append({"t": now, "event": "load_started", "model": model,
                                "serving": serving})

    def on_load_end(self, model: str, nbytes: int, ok: bool, now: float) -> None:
        with self._lock:
            start, serving = self._loading.pop(model, (now, False))
            self._last_load_end = now
            record = {"model": model, "bytes": nbytes, "start": start, "end": now,
                      "seconds": now - start, "ok": ok, "serving": serving}
            self.loads.append(record)
            self.counters["loads_total"] += 1
            self.counters["load_bytes_total"] += nbytes
            if self.engine.device.type != "cpu":
                self.counters["h2d_bytes_total"] += nbytes
            self.events.append({"t": now, "event": "load_finished", **record})

    # --- readers (any thread) ---------------------------------------------------------------------
    def recent_timelines(self, since: float | None = None) -> list[RequestTimeline]:
        with self._lock:
            items = self.timelines.items()
        return [t for t in items if since is None or (t.finished or 0) > since]

    def recent_steps(self, since: float | None = None) -> list[dict]:
        with self._lock:
            items = self.steps.items()
        return [s for s in items if since is None or s["end"] > since]

    def recent_events(self, since: float | None = None) -> list[dict]:
        with self._lock:
            items = self.events.items()
        return [e for e in items if since is None or e["t"] > since]

    def snapshot(self, now: float | None = None) -> EngineSnapshot:
        """The engine snapshot (engine_hooks.records.snapshot, docs/snapshot.md) at `now`
        (monotonic)."""
        now = time.monotonic() if now is None else now
        cfg, engine = self.config, self.engine
        with self._lock:
            records = WindowRecords(
                steps=[s for s in self.steps.items() if s["end"] > now - cfg.window_s],
                finished=[t for t in self.timelines.items() if (t.finished or 0) > now - cfg.window_s],
                loads=self.loads.items(), in_flight=self._in_flight_waits(now),
                loading={m: start for m, (start, _) in self._loading.items()},
                usage=_kv_usage(self._usage))
            counters = Counters.counted(self.counters)
            wait_seconds = dict(self.wait_seconds)
            dropped = Dropped(steps=self.steps.dropped, timelines=self.timelines.dropped,
                              events=self.events.dropped)
        # the full account is the engine thread's; the used blocks are counted now
        if records.usage is not None:
            records.usage.used_blocks = engine.allocator.num_blocks - engine.allocator.num_free_blocks()
        ec = engine.config
        return EngineSnapshot(
            clock=Clock(monotonic=now, wall=time.time() - (time.monotonic() - now)),
            engine=EngineInfo(
                source="hooks",
                model=ec.model, models=ec.models, allocator=ec.allocator, block_size=ec.block_size,
                max_num_seqs=ec.max_num_seqs, max_num_batched_tokens=ec.max_num_batched_tokens,
                enable_chunked_prefill=ec.enable_chunked_prefill, policy=ec.policy,
                max_model_len=ec.max_model_len, num_preload_models=ec.num_preload_models,
                device=str(engine.device), dtype=str(engine.dtype).removeprefix("torch."),
                kv_cache_bytes=engine.kv_cache.total_bytes, kv_bytes_per_token=self._token_bytes,
                resident_models=engine.residency.resident_names(),
                loading_models=engine.residency.loading_names(),
                attention_reference=self.attention_reference,
            ),
            usage=records.usage,
            window=window_stats(records, self._window_settings, reference=self.attention_reference,
                                now=now, span=min(cfg.window_s, now - self.started)),
            counters=counters,
            wait_seconds_by_reason=wait_seconds,
            hook_errors=dict(self.guard_errors()),
            health=Health(failure=engine.failure, step_errors=dict(engine.step_errors),
                          finish_reasons=dict(engine.finish_reasons)),
            dropped=dropped,
        )

    def run_figures(self) -> Window:
        """The window figures over everything still in the rings: a whole lab run's account."""
        now = time.monotonic()
        with self._lock:
            records = WindowRecords(steps=self.steps.items(), finished=self.timelines.items(),
                                    loads=self.loads.items(), usage=_kv_usage(self._usage))
        steps = records.steps
        span = (steps[-1]["end"] - steps[0]["start"]) if steps else 0.0
        return window_stats(records, self._window_settings, reference=self.attention_reference,
                            now=now, span=span)

    def _in_flight_waits(self, now: float) -> list[tuple[float, float]]:
        """(wait so far, of which decided by the scheduler) of every request not yet finished,
        those still queued behind the step in progress included: a long prefill's step hides its
        queue from the step records."""
        out = []
        for req, timeline in self._active.values():
            waited, decided = timeline.scheduler_wait_s, timeline.decided_wait_s
            if req.status is Status.WAITING:
                since = self._waits.pending_since(req.request_id, timeline.arrival)
                waited += now - since
                if self._waits.pending_reason(req.request_id) is not None or self._behind_long_prefill(since):
                    decided += now - since
            out.append((waited, decided))
        for rid, req in list(self._arrived.items()):
            # failed before any step saw it (engine stopped, aborted)
            if req.finish_reason is not None:
                del self._arrived[rid]
                continue
            pending = now - req.arrival_time
            out.append((pending, pending if self._behind_long_prefill(req.arrival_time) else 0.0))
        return out

    def _behind_long_prefill(self, since: float) -> bool:
        """Would a wait pending since `since` be charged to a long prefill (WaitTracker.charge)
        if scheduled now? The step running now is the one it waits behind; between steps, the
        step that just ended."""
        if self._in_step:
            return self._step_long_prefill is not None
        previous = self._previous_step
        return previous is not None and previous[2] is not None and since < previous[1]

    def guard_errors(self) -> Counter:
        guard = getattr(self, "guard", None)
        return guard.errors if guard is not None else Counter()


def _kv_usage(usage) -> KvUsage | None:
    """The allocator's account (engine_hooks.engine.allocator.AllocatorUsage) as the snapshot
    gives it."""
    if usage is None:
        return None
    return KvUsage(num_blocks=usage.num_blocks, used_blocks=usage.used_blocks,
                   largest_free_run=usage.largest_free_run,
                   unusable_free_blocks=usage.unusable_free_blocks)
