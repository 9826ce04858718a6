"""`instrument(engine)` wraps the engine's seams from outside; `uninstrument(engine)` puts them
back.

Seams: `engine.submit` (arrivals), `engine.step` and `engine.schedule`, `scheduler.preempt`,
`allocator.allocate`, `runner.forward`, `residency.load` (the loader thread), and the attention
function the model calls, timed only while an instrumented engine's forward pass runs on the current
thread. Every hook runs inside the guard: a failing hook is counted and logged once, the engine goes
on.
"""

from __future__ import annotations

import threading
import time

from stagelens.engine_hooks.engine import model as model_module
from stagelens.engine_hooks.hooks.calibrate import ideal_layout_curve
from stagelens.engine_hooks.hooks.guard import HookGuard
from stagelens.engine_hooks.hooks.patching import Patcher
from stagelens.engine_hooks.hooks.recorder import Recorder, RecorderConfig

_ATTR = "_stagelens_instrumentation"
_current = threading.local()          # the recorder whose forward pass runs on this thread
_attention_patch = {"count": 0, "original": None}
_attention_lock = threading.Lock()


def instrument(engine, config: RecorderConfig | None = None) -> Recorder:
    """Start observing `engine`; returns the recorder. Instrumenting twice returns the same
    recorder."""
    existing = getattr(engine, _ATTR, None)
    if existing is not None:
        return existing[0]
    recorder = Recorder(engine, config)
    guard = recorder.guard = HookGuard()
    if recorder.config.calibrate:
        p = engine.config.preset
        recorder.attention_reference = ideal_layout_curve(
            p.num_kv_heads, p.num_heads, p.head_dim, engine.config.block_size, engine.dtype,
            engine.device)
    patcher = Patcher()
    _wrap_step(patcher, engine, recorder, guard)
    _wrap_scheduler(patcher, engine, recorder, guard)
    _wrap_allocator(patcher, engine, recorder, guard)
    _wrap_runner(patcher, engine, recorder, guard)
    _wrap_loader(patcher, engine, recorder, guard)
    _patch_attention()
    engine.__dict__[_ATTR] = (recorder, patcher)
    return recorder


def uninstrument(engine) -> None:
    """Remove every wrapper; the engine is left exactly as it was."""
    entry = engine.__dict__.pop(_ATTR, None)
    if entry is None:
        return
    entry[1].restore()
    _unpatch_attention()


def is_instrumented(engine) -> bool:
    return _ATTR in engine.__dict__


def _wrap_step(patcher: Patcher, engine, rec: Recorder, guard: HookGuard) -> None:
    def make_submit(submit):
        def instrumented_submit(*args, **kwargs):
            req = submit(*args, **kwargs)
            guard.run("submit", rec.on_arrival, req)
            return req
        return instrumented_submit

    def make_step(step):
        def instrumented_step():
            guard.run("step_start", rec.on_step_start)
            stats = step()
            guard.run("step_end", rec.on_step_end, stats)
            return stats
        return instrumented_step

    def make_schedule(schedule):
        def instrumented_schedule():
            waiting = []
            guard.run("schedule", lambda: waiting.extend(rec.before_schedule()))
            now = time.monotonic()
            batch = schedule()
            guard.run("schedule", rec.on_schedule, waiting, batch, now)
            return batch
        return instrumented_schedule

    patcher.wrap(engine, "submit", make_submit)
    patcher.wrap(engine, "step", make_step)
    patcher.wrap(engine, "schedule", make_schedule)


def _wrap_scheduler(patcher: Patcher, engine, rec: Recorder, guard: HookGuard) -> None:
    allocator = engine.allocator

    def make_preempt(preempt):
        def instrumented_preempt(req):
            free = allocator.num_free_blocks()
            preempt(req)
            guard.run("preempt", rec.on_preempt, req, free, time.monotonic())
        return instrumented_preempt

    patcher.wrap(engine.scheduler, "preempt", make_preempt)


def _wrap_allocator(patcher: Patcher, engine, rec: Recorder, guard: HookGuard) -> None:
    allocator = engine.allocator

    def make_allocate(allocate):
        def instrumented_allocate(request_id, num_tokens):
            ok = allocate(request_id, num_tokens)
            if not ok:
                guard.run("allocate", rec.on_allocation_failure, allocator.num_free_blocks())
            return ok
        return instrumented_allocate

    patcher.wrap(allocator, "allocate", make_allocate)


def _wrap_runner(patcher: Patcher, engine, rec: Recorder, guard: HookGuard) -> None:
    def make_forward(forward):
        def instrumented_forward(inputs):
            guard.run("forward", rec.on_forward, inputs)
            _current.recorder = rec
            try:
                return forward(inputs)
            finally:
                _current.recorder = None
        return instrumented_forward

    patcher.wrap(engine.runner, "forward", make_forward)


def _wrap_loader(patcher: Patcher, engine, rec: Recorder, guard: HookGuard) -> None:
    def make_load(load):
        def instrumented_load(name, cold=True):
            guard.run("load", rec.on_load_start, name, time.monotonic())
            nbytes, ok = 0, False
            try:
                model, nbytes = load(name, cold)
                ok = True
                return model, nbytes
            finally:
                guard.run("load", rec.on_load_end, name, nbytes, ok, time.monotonic())
        return instrumented_load

    patcher.wrap(engine.residency, "load", make_load)


def _timed_attention(q, k_pool, v_pool, batch, out=None):
    original = _attention_patch["original"]
    rec = getattr(_current, "recorder", None)
    if rec is None:
        return original(q, k_pool, v_pool, batch, out)
    if q.is_cuda:
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = original(q, k_pool, v_pool, batch, out)
        end.record()
        rec.guard.run("attention", rec.on_attention_events, start, end)
        return result
    t0 = time.perf_counter()
    result = original(q, k_pool, v_pool, batch, out)
    rec.guard.run("attention", rec.on_attention_time, time.perf_counter() - t0)
    return result


def _patch_attention() -> None:
    with _attention_lock:
        if _attention_patch["count"] == 0:
            _attention_patch["original"] = model_module.paged_attention
            model_module.paged_attention = _timed_attention
        _attention_patch["count"] += 1


def _unpatch_attention() -> None:
    with _attention_lock:
        _attention_patch["count"] -= 1
        if _attention_patch["count"] == 0:
            model_module.paged_attention = _attention_patch["original"]
            _attention_patch["original"] = None
