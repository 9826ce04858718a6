"""Cold path metrics: model loads, their bytes and duration, steps slowed by loads, requests
waiting on a model."""

from __future__ import annotations

from stagelens import catalogue as c
from stagelens.metrics.families import Scrape

AS_HELD = (c.MODEL_LOADS, c.MODEL_LOAD_BYTES, c.H2D_BYTES, c.H2D_RATE, c.NUM_PRELOAD,
           c.STEP_TIME_INFLATION, c.WAITING_ON_MODEL, c.WINDOW_LOADS)


def collect(out: Scrape, frame, _diagnosis) -> None:
    engine = frame.engine if frame else None
    if engine is None:
        return
    out.add_as_held(engine, AS_HELD)
    cold = engine.window.cold_path
    loading = cold.loads_in_progress
    out.add(c.LOADS_IN_PROGRESS, len(loading) if loading is not None else None)
    for load in loading or []:
        out.add(c.LOAD_IN_PROGRESS_SECONDS, load.seconds, model=load.model)
    for model in engine.engine.resident_models or []:
        out.add(c.MODEL_RESIDENT, 1, model=model)
    for model_load, seconds in (("running", cold.step_time_during_load_s),
                                ("none", cold.step_time_without_load_s)):
        out.add(c.DECODE_STEP_SECONDS, seconds, model_load=model_load)
