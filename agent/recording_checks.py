"""What a recording says of the engine and its requests, checked once where it comes in, by the
same rules whichever door it comes through: a bundle's lines (agent/bundle.py) and a running
agent's what-if window (`whatif --connect`, `/api/v1/whatif/window`). Replay, what-if and the
diagnosis then compute on values they can trust: of the type written, finite and in range, in an
order time allows (no step or load ends before it starts, no first token before its arrival:
engine_hooks/records/timeline_reading.py). Each check returns what is wrong, naming the field
(`steps[3].end: ...`), or None."""

from __future__ import annotations

from stagelens.engine_hooks.records.timeline import RequestTimeline
from stagelens.engine_hooks.records.timeline_reading import TIME_WORDS, TimelineError, is_time, read_timeline
from stagelens.numbers import shown

# What a step record keeps of the flight recorder's (engine_hooks.hooks.recorder): the batch and its
# time
STEP_FIELDS = ("index", "start", "end", "prefill_tokens", "prefill_pairs", "decode_tokens",
               "prefill_seqs", "decode_seqs", "kv_tokens_cached", "kv_slots_reserved", "waiting",
               "running", "preempted", "loading", "forwards")
LOAD_FIELDS = ("model", "start", "end", "seconds", "ok")
# a step's counts (tokens, pairs, sequences): exact in a float, and squared still finite
MAX_FIGURE = 2**53

_TIMES = ("start", "end")
_FLAGS = ("loading", "ok")
_TEXTS = ("model",)
# Timeline fields the bundle's dicts carry beside what `read_timeline` reads (derived, kept for
# older readers)
_DERIVED_TIMES = ("ttft_s", "latency_s")


class RecordingProblem(ValueError):
    """What is wrong with a recording, naming the field."""


def timeline_problem(t) -> str | None:
    try:
        checked_timeline(t)
    except RecordingProblem as exc:
        return str(exc)
    return None


def checked_timeline(t) -> RequestTimeline:
    """The timeline `t` holds, read once; RecordingProblem when it holds none."""
    if not isinstance(t, dict):
        raise RecordingProblem(f"must be an object, got {shown(t)}")
    try:
        timeline = read_timeline(t)
    except TimelineError as exc:
        raise RecordingProblem(str(exc)) from None
    bad = next((k for k in _DERIVED_TIMES if t.get(k) is not None and not is_time(t[k])), None)
    if bad is not None:
        raise RecordingProblem(f"{bad}: must be a finite number or null, got {shown(t[bad])}")
    return timeline


def steps_problem(steps, loads) -> str | None:
    """The steps and model loads of a `steps` record (or an agent's window): lists (or null) of
    objects with every field, each of its type and range, none ending before it starts."""
    for key, fields, items in (("steps", STEP_FIELDS, steps), ("loads", LOAD_FIELDS, loads)):
        if items is None:
            continue
        if not isinstance(items, list):
            return f"{key}: must be a list, got {shown(items)}"
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                return f"{key}[{i}]: must be an object with {', '.join(fields)}, got {shown(item)}"
            problem = _item_problem(item, fields)
            if problem:
                return f"{key}[{i}].{problem}"
            if item["end"] < item["start"]:
                return f"{key}[{i}]: ends ({shown(item['end'])}) before it starts ({shown(item['start'])})"
    return None


def _item_problem(item: dict, fields: tuple[str, ...]) -> str | None:
    for k in fields:
        if k not in item:
            return f"{k}: missing"
        value = item[k]
        if k in _FLAGS:
            ok, words = isinstance(value, bool), "true or false"
        elif k in _TEXTS:
            ok, words = isinstance(value, str), "a string"
        elif k in _TIMES:
            ok, words = is_time(value), TIME_WORDS
        else:
            ok, words = _is_figure(value), f"a finite number in [0, 2**{MAX_FIGURE.bit_length() - 1}]"
        if not ok:
            return f"{k}: must be {words}, got {shown(value)}"
    return None


def engine_config_problem(cfg) -> str | None:
    """The bundled engine's settings as recorded: what the simulator runs on
    (agent/whatif/settings.py)."""
    from stagelens.whatif.settings import recorded_problem

    return recorded_problem(cfg)


def window_timelines(window) -> list[RequestTimeline]:
    """An agent's what-if window (agent/lab/host.py `whatif_window`) checked as a bundle's
    records must be: timelines, and the hosted engine's settings, steps and loads; its timelines,
    each read once. RecordingProblem naming the first field that is wrong."""
    if not isinstance(window, dict):
        raise RecordingProblem(f"must be an object, got {shown(window)}")
    items = window.get("timelines")
    if not isinstance(items, list):
        raise RecordingProblem(f"timelines: must be a list, got {shown(items)}")
    timelines = []
    for i, t in enumerate(items):
        try:
            timelines.append(checked_timeline(t))
        except RecordingProblem as exc:
            raise RecordingProblem(f"timelines[{i}]: {exc}") from None
    problem = None
    if window.get("engine_config") is not None:
        problem = engine_config_problem(window["engine_config"])
        problem = problem and f"engine_config: {problem}"
    problem = problem or steps_problem(window.get("steps"), window.get("loads"))
    if problem:
        raise RecordingProblem(problem)
    return timelines


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_figure(v) -> bool:
    return _is_number(v) and 0 <= v <= MAX_FIGURE
