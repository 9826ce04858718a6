"""The agent's own health: collectors of the frame, the frame's time, the driver, hook errors, ring drops."""

from __future__ import annotations

from stagelens.metrics.families import Scrape

DRIVER_STATES = ("ok", "no_driver", "error")
# The hooks engine_hooks.hooks.instrumentation guards: exported at 0 from the start, so the first error is an increase.
HOOKS = ("step_start", "step_end", "schedule", "preempt", "allocate", "forward", "load", "attention")


def collect(out: Scrape, frame, _diagnosis) -> None:
    if frame is None:
        return
    out.gauge("stagelens_frame_timestamp_seconds", "When the frame this scrape reads was sampled (Unix time).",
              frame.time_unix)
    for c in frame.collectors:
        out.flag("stagelens_collector_success", "1 when the collector succeeded in the latest frame.", c.success,
                 collector=c.name)
        out.gauge("stagelens_collector_duration_seconds", "How long the collector took in the latest frame.",
                  c.duration_seconds, collector=c.name)
    driver = frame.node_sample.driver if frame.node_sample is not None else None
    if driver is not None:
        for state in DRIVER_STATES:
            out.flag("stagelens_driver_state", "1 for the NVML driver's current state (ok, no_driver, error).",
                     driver.state == state, state=state)
        out.gauge("stagelens_driver_info", "1, labelled with the driver and CUDA versions and the NVML source.", 1,
                  driver_version=driver.driver_version or "",
                  cuda_driver_version=driver.cuda_driver_version or "", source=driver.source or "")
    engine = frame.engine
    out.flag("stagelens_engine_attached", "1 when the frame holds an engine snapshot.", engine is not None)
    if engine is None:
        return
    config = engine.engine
    chunked = config.enable_chunked_prefill
    out.gauge("stagelens_engine_info", "1, labelled with the engine's configuration.", 1,
              model=config.model, allocator=config.allocator, policy=config.policy, device=config.device,
              dtype=config.dtype, chunked_prefill="" if chunked is None else str(chunked).lower(),
              source=config.source or "")
    for name, count in sorted((engine.intake or {}).items()):
        part, _, what = name.partition(".")
        out.counter("stagelens_engine_intake_total", "What an engine read from outside sent beside its /metrics, "
                    "and its /metrics families refused as implausible (part: traces, kv_events, metrics), counted "
                    "since the agent started.", count, part=part, what=what)
    out.gauge("stagelens_engine_window_seconds", "Span of the window the engine's derived figures cover.",
              engine.window.span_s)
    health = engine.health    # None: not observable, so neither up nor down is said
    out.flag("stagelens_engine_up", "1 while the engine's loop serves; 0 once it died (see the agent's log).",
             health.failure is None if health is not None else None)
    for phase, count in sorted(((health.step_errors if health else None) or {}).items()):
        out.counter("stagelens_engine_step_errors_total",
                    "Engine steps that raised, by phase; their requests failed, the engine went on.", count,
                    phase=phase)
    for reason, count in sorted(((health.finish_reasons if health else None) or {}).items()):
        out.counter("stagelens_engine_requests_ended_total",
                    "Requests the engine ended, by finish reason (length, stop, abort, timeout, error).", count,
                    reason=reason)
    errors = engine.hook_errors
    if errors is not None:      # the hooks are the bundled engine's: a source without them leaves these out
        for hook in sorted(set(HOOKS) | set(errors)):
            out.counter("stagelens_hook_errors_total", "Hook failures (the engine went on; the figures may be short).",
                        errors.get(hook, 0), hook=hook)
    dropped = engine.dropped
    for ring in ("events", "steps", "timelines") if dropped is not None else ():
        out.counter("stagelens_recorder_dropped_total", "Records the recorder's bounded rings overwrote unread.",
                    getattr(dropped, ring), ring=ring)
