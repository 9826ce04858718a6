"""The agent's own health: collectors of the frame, the frame's time, the driver, hook errors,
ring drops."""

from __future__ import annotations

from stagelens import catalogue as c
from stagelens.metrics.families import Scrape

DRIVER_STATES = ("ok", "no_driver", "error")
# The hooks engine_hooks.hooks.instrumentation guards: exported at 0 from the start, so the first
# error is an increase.
HOOKS = ("step_start", "step_end", "schedule", "preempt", "allocate", "forward", "load", "attention")


def collect(out: Scrape, frame, _diagnosis) -> None:
    if frame is None:
        return
    out.add(c.FRAME_TIMESTAMP, frame.time_unix)
    for collector in frame.collectors:
        out.add(c.COLLECTOR_SUCCESS, collector.success, collector=collector.name)
        out.add(c.COLLECTOR_DURATION, collector.duration_seconds, collector=collector.name)
    driver = frame.node_sample.driver if frame.node_sample is not None else None
    if driver is not None:
        for state in DRIVER_STATES:
            out.add(c.DRIVER_STATE, driver.state == state, state=state)
        out.add(c.DRIVER_INFO, 1, driver_version=driver.driver_version or "",
                cuda_driver_version=driver.cuda_driver_version or "", source=driver.source or "")
    engine = frame.engine
    out.add(c.ENGINE_ATTACHED, engine is not None)
    if engine is not None:
        _engine(out, engine)


def _engine(out: Scrape, engine) -> None:
    config = engine.engine
    chunked = config.enable_chunked_prefill
    out.add(c.ENGINE_INFO, 1, model=config.model, allocator=config.allocator, policy=config.policy,
            device=config.device, dtype=config.dtype,
            chunked_prefill="" if chunked is None else str(chunked).lower(),
            source=config.source or "")
    for name, count in sorted((c.ENGINE_INTAKE.read(engine) or {}).items()):
        part, _, what = name.partition(".")
        out.add(c.ENGINE_INTAKE, count, part=part, what=what)
    out.add_as_held(engine, (c.ENGINE_WINDOW,))
    health = engine.health    # None: not observable, so neither up nor down is said
    out.add(c.ENGINE_UP, health.failure is None if health is not None else None)
    for phase, count in sorted((c.ENGINE_STEP_ERRORS.read(engine) or {}).items()):
        out.add(c.ENGINE_STEP_ERRORS, count, phase=phase)
    for reason, count in sorted((c.ENGINE_REQUESTS_ENDED.read(engine) or {}).items()):
        out.add(c.ENGINE_REQUESTS_ENDED, count, reason=reason)
    errors = c.HOOK_ERRORS.read(engine)
    # the hooks are the bundled engine's: a source without them leaves these out
    if errors is not None:
        for hook in sorted(set(HOOKS) | set(errors)):
            out.add(c.HOOK_ERRORS, errors.get(hook, 0), hook=hook)
    dropped = c.RECORDER_DROPPED.read(engine)
    for ring in ("events", "steps", "timelines") if dropped is not None else ():
        out.add(c.RECORDER_DROPPED, getattr(dropped, ring), ring=ring)
