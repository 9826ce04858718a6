"""Cold path metrics: model loads, their bytes and duration, steps slowed by loads, requests waiting on a model."""

from __future__ import annotations

from stagelens.metrics.families import Scrape


def collect(out: Scrape, frame, _diagnosis) -> None:
    engine = frame.engine if frame else None
    if engine is None:
        return
    config, c, counters = engine.engine, engine.window.cold_path, engine.counters
    out.counter("stagelens_model_loads_total", "Model loads finished.", counters.loads_total)
    out.counter("stagelens_model_load_bytes_total", "Bytes of weights loaded.", counters.load_bytes_total)
    out.counter("stagelens_cold_path_h2d_bytes_total", "Bytes copied host to device (weights and inputs).",
                counters.h2d_bytes_total)
    out.gauge("stagelens_cold_path_h2d_bytes_per_second", "Host-to-device copy rate over the window.",
              c.h2d_bytes_per_s)
    loading = c.loads_in_progress
    out.gauge("stagelens_model_loads_in_progress", "Model loads running now.",
              len(loading) if loading is not None else None)
    for load in loading or []:
        out.gauge("stagelens_model_load_in_progress_seconds", "How long a running model load has taken so far.",
                  load.seconds, model=load.model)
    out.gauge("stagelens_model_num_preload", "Models kept resident (--num-preload-models).", config.num_preload_models)
    for model in config.resident_models or []:
        out.gauge("stagelens_model_resident", "1 for each model resident on the device.", 1, model=model)
    for model_load, seconds in (("running", c.step_time_during_load_s), ("none", c.step_time_without_load_s)):
        out.gauge("stagelens_cold_path_decode_step_seconds",
                  "Mean decode step time over the window, with a model load running or not.", seconds,
                  model_load=model_load)
    out.gauge("stagelens_cold_path_step_time_inflation",
              "Decode step time during model loads / without (1 is no inflation).", c.step_time_inflation)
    out.gauge("stagelens_cold_path_waiting_on_model_requests", "Requests queued because their model is not resident.",
              c.waiting_on_model)
    out.gauge("stagelens_cold_path_window_loads", "Model loads finished in the window.", c.loads_in_window)
