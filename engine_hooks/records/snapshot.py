"""The engine snapshot (`stagelens-engine/1`, docs/snapshot.md): what an engine source reports each
tick.

This is the contract every engine source fills — the bundled engine's flight recorder
(engine_hooks/hooks/recorder.py) today, an engine read from outside next — and the one shape the
agent reads engine figures in: the diagnosis, /metrics, the TUI, the HTTP API and recorded bundles.

None is a value, never a missing attribute: every figure a source might not observe is None when it
does not observe it (*not observable*), and the bundled engine also reports None where its window
holds no data for a figure. So None is never healthy: a reader shows it as unknown, and the
diagnosis treats a figure's None as "nothing to judge" only where an observed count shows the
situation absent (no step ran, no model loaded). Two fields say otherwise, and say so where they
are: `Health.failure` (None: the engine's loop serves) and the `Counters` (0 until the first count).

`to_dict()` gives the JSON of docs/snapshot.md; `EngineSnapshot.from_dict()` reads it back and
checks it, raising SnapshotError whose message starts with the field
(`window.kv.fragmentation_ratio: ...`). Keys it does not know are ignored (new ones may come under
the same format); a figure that is absent reads as None. Plain dataclasses and no torch: the agent
imports this without an engine.
"""

from __future__ import annotations

import sys
from dataclasses import Field, dataclass, fields
from functools import cache
from typing import Any, ClassVar

from stagelens.engine_hooks.shared.quoting import shown

SNAPSHOT_FORMAT = "stagelens-engine/1"
# The span of a snapshot's window (`window`): the seconds its deltas and means cover, the hooks' as
# an outside source's, so that figures of either compare alike
WINDOW_S = 10.0


class SnapshotError(ValueError):
    """A snapshot that cannot be read; the message starts with the field that is not as written."""


class _Section:
    """JSON both ways for a section: each field under its own name, in declaration order."""
    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]   # every section is a dataclass

    def to_dict(self) -> dict:
        return {f.name: _json(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, data, where: str):
        _check_object(data, where)
        # a class is hashable: mypy checks type[Self] against Hashable with the instances' __hash__
        readers = _readers(cls)   # type: ignore[arg-type]
        return cls(**{name: read(data.get(name), f"{where}.{name}") for name, read in readers})


# --- what the engine is ---------------------------------------------------------------------------
@dataclass(slots=True, kw_only=True)
class Clock(_Section):
    # the instant of the snapshot on the engine's monotonic clock (every other time's)
    monotonic: float
    wall: float           # the same instant as Unix time


@dataclass(slots=True, kw_only=True)
class EngineInfo(_Section):
    """The engine's configuration and what is loaded (`engine`)."""
    # who fills the snapshot: "hooks" (the bundled engine), "vllm", "sglang"
    source: str | None = None
    # an engine read from outside: its metric names' generation, as detected
    generation: str | None = None
    model: str | None = None
    models: int | None = None
    allocator: str | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool | None = None
    policy: str | None = None
    max_model_len: int | None = None
    num_preload_models: int | None = None
    device: str | None = None
    dtype: str | None = None
    kv_cache_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    # tokens the KV cache holds in all (vLLM's kv_cache_size_tokens)
    kv_capacity_tokens: int | None = None
    # an engine read from outside: the flag that sets that capacity, as set
    kv_capacity_lever: str | None = None
    # the model sets the block size (hybrid attention + mamba)
    block_size_forced: bool | None = None
    # an engine read from outside: whether it shares prompts' KV blocks (vLLM's cache_config_info)
    enable_prefix_caching: bool | None = None
    resident_models: list[str] | None = None
    loading_models: list[str] | None = None
    # as hooks/calibrate.py measured it; hooks/reference.py reads it
    attention_reference: dict | None = None

    @property
    def on_cuda(self) -> bool:
        """Whether attention runs on a CUDA device (where it is memory-bound); False when
        unknown."""
        return (self.device or "").startswith("cuda")


@dataclass(slots=True, kw_only=True)
class KvUsage(_Section):
    """The KV allocator's last full account (`usage`)."""
    num_blocks: int | None = None
    used_blocks: int | None = None
    largest_free_run: int | None = None
    unusable_free_blocks: int | None = None


# --- the window -----------------------------------------------------------------------------------
@dataclass(slots=True, kw_only=True)
class KvFigures(_Section):
    fragmentation_ratio: float | None = None
    slots_reserved_mean: float | None = None
    tokens_cached_mean: float | None = None
    access_efficiency: float | None = None
    read_bandwidth_bytes_per_s: float | None = None
    effective_bandwidth_ratio: float | None = None
    bandwidth_swing_cv: float | None = None
    gathered_share: float | None = None
    block_runs_per_sequence: float | None = None
    attention_share_of_step: float | None = None
    sequence_lengths: list[int] | None = None
    # share of samples: no room for one more request, and a queue
    full_while_waiting_share: float | None = None
    # from outside: preempted (SGLang: retracted) in the window per request finished, where requests
    # queued: the pool ran out
    preemptions_per_request: float | None = None
    # from outside: the KV tokens a finished request held (prompt + output, less prefix-cache
    # hits), and the most requests seen running at once: the pool's arithmetic
    tokens_per_request: float | None = None
    most_running: int | None = None
    # from outside: prompt tokens found in the prefix cache / queried, in the window
    prefix_hit_share: float | None = None
    # block-level, from an engine's KV events (vLLM's --kv-events-config); None where none are
    # received
    blocks_stored: int | None = None
    blocks_removed: int | None = None
    # stored again soon after their removal: KV recomputed
    blocks_restored: int | None = None
    # store to removal, of the blocks removed in the window
    block_lifetime_p50_s: float | None = None


@dataclass(slots=True, kw_only=True)
class SchedulerFigures(_Section):
    steps: int | None = None
    busy_ratio: float | None = None
    busy_ratio_while_waiting: float | None = None
    waiting_share: float | None = None
    budget_use_while_waiting: float | None = None
    wait_p50_s: float | None = None
    wait_p99_s: float | None = None
    decided_wait_p50_s: float | None = None
    decided_wait_p99_s: float | None = None
    # where only bounds are known (coarse histograms)
    decided_wait_p99_at_least_s: float | None = None
    decided_wait_p99_at_most_s: float | None = None
    # ... and the mean wait the queue's gauges give (Little's law), which settles bounds that
    # straddle a threshold
    decided_wait_estimate_s: float | None = None
    requests_finished: int | None = None
    head_of_line_share: float | None = None
    wait_seconds_by_reason: dict[str, float] | None = None
    waiting: int | None = None
    running: int | None = None
    tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None
    step_time_mean_s: float | None = None
    # from outside: no step finished for this long while requests ran
    no_step_for_s: float | None = None
    # from outside, of the requests finished in the window: the share cut at their length limit
    # (finished_reason=length) and the share that failed (abort, error)
    cut_at_length_share: float | None = None
    failed_share: float | None = None
    # speculative decoding: draft tokens accepted / proposed in the window
    spec_acceptance: float | None = None


@dataclass(slots=True, kw_only=True)
class LoadInProgress(_Section):
    model: str
    since: float | None = None       # monotonic seconds: when it started
    seconds: float | None = None     # how long it has run


@dataclass(slots=True, kw_only=True)
class ColdPathFigures(_Section):
    loads_in_progress: list[LoadInProgress] | None = None
    loads_in_window: int | None = None
    load_seconds_in_window: float | None = None
    load_bytes_in_window: int | None = None
    step_time_during_load_s: float | None = None
    step_time_without_load_s: float | None = None
    step_time_inflation: float | None = None
    waiting_on_model: int | None = None
    h2d_bytes_per_s: float | None = None


@dataclass(slots=True, kw_only=True)
class TailFigures(_Section):
    """The requests at or past the quantile of a metric, their time added up by component."""
    quantile: float
    p50_s: float
    threshold_s: float
    requests: int
    of_requests: int
    seconds: dict[str, float]


@dataclass(slots=True, kw_only=True)
class WindowTail(_Section):
    ttft: TailFigures | None = None       # None: no request with a first token in the window
    latency: TailFigures | None = None    # None: no request ended in the window


@dataclass(slots=True, kw_only=True)
class Window(_Section):
    """Figures over the recent window (`window`); `tail` None: the source does not split
    requests' time."""
    span_s: float
    kv: KvFigures
    scheduler: SchedulerFigures
    cold_path: ColdPathFigures
    tail: WindowTail | None = None


# --- totals and health ----------------------------------------------------------------------------
@dataclass(slots=True, kw_only=True)
class Counters(_Section):
    """Totals since the engine was instrumented. A source that counts one reports 0 until its
    first count; None: the source does not count it. In JSON a counter that has not counted yet
    is left out (absent means 0, docs/snapshot.md): `uncounted` names those, so the JSON reads
    back as it was written."""
    steps_total: float | None = None
    busy_seconds_total: float | None = None
    idle_seconds_total: float | None = None
    tokens_scheduled_total: float | None = None
    kv_useful_bytes_total: float | None = None
    kv_moved_bytes_total: float | None = None
    kv_gathered_bytes_total: float | None = None
    attention_seconds_total: float | None = None
    h2d_bytes_total: float | None = None
    requests_finished_total: float | None = None
    requests_failed_total: float | None = None
    preemptions_total: float | None = None
    preemptions_with_free_memory_total: float | None = None
    allocation_failures_total: float | None = None
    allocation_failures_with_free_memory_total: float | None = None
    loads_total: float | None = None
    load_bytes_total: float | None = None
    uncounted: frozenset[str] = frozenset()

    @classmethod
    def counted(cls, counts: dict[str, float]) -> Counters:
        """The counters of a source that counts every one: those not in `counts` have not counted
        yet (0)."""
        names = counter_names()
        return cls(**{n: counts.get(n, 0) for n in names},
                   uncounted=frozenset(n for n in names if n not in counts))

    def to_dict(self) -> dict:
        out = {}
        for name in counter_names():
            value = getattr(self, name)
            if not (value == 0 and name in self.uncounted):
                out[name] = value
        return out

    @classmethod
    def from_dict(cls, data, where: str) -> Counters:
        _check_object(data, where)
        return cls.counted({n: _counter(data[n], f"{where}.{n}") for n in counter_names() if n in data})


@cache
def counter_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(Counters) if f.name != "uncounted")


@dataclass(slots=True, kw_only=True)
class Health(_Section):
    failure: str | None = None        # why the engine's loop died; None while it serves
    step_errors: dict[str, int] | None = None      # step failures by phase
    finish_reasons: dict[str, int] | None = None   # how requests ended, by reason


@dataclass(slots=True, kw_only=True)
class Dropped(_Section):
    """Records the recorder's bounded rings overwrote before they were read."""
    steps: int | None = None
    timelines: int | None = None
    events: int | None = None


# --- the snapshot ---------------------------------------------------------------------------------
@dataclass(slots=True, kw_only=True)
class EngineSnapshot(_Section):
    """One engine source's report of one tick. Sections that are None are not observable by the
    source."""
    format: str = SNAPSHOT_FORMAT
    clock: Clock
    engine: EngineInfo
    usage: KvUsage | None = None                          # also None before the engine's first step
    window: Window
    counters: Counters
    wait_seconds_by_reason: dict[str, float] | None = None   # since instrumentation, by wait reason
    hook_errors: dict[str, int] | None = None                 # hook failures by hook
    health: Health | None = None
    dropped: Dropped | None = None
    # Figures a source read off what the engine publishes rather than measured: their path
    # (`window.kv.fragmentation_ratio`) -> how, in words with the numbers. None: every figure is
    # measured.
    inferred: dict[str, str] | None = None
    # What an engine read from outside sent beside its /metrics, counted since the agent started:
    # traces (`traces.<count>`: spans received, malformed bodies, forwarded...) and KV events
    # (`kv_events.<count>`)
    intake: dict[str, float] | None = None

    @property
    def failure(self) -> str | None:
        """Why the engine's loop died; None while it serves (or when its health is not
        observable)."""
        return self.health.failure if self.health is not None else None

    @classmethod
    def from_dict(cls, data, where: str = "") -> EngineSnapshot:
        """The snapshot of a JSON object; SnapshotError naming the field that is not as written."""
        _check_object(data, where or "the snapshot")
        at = f"{where}." if where else ""
        # what the diagnosis reads first is checked first, so a broken snapshot is named by its
        # worst field
        engine = EngineInfo.from_dict(data.get("engine"), f"{at}engine")
        counters = Counters.from_dict(data.get("counters"), f"{at}counters")
        window = Window.from_dict(data.get("window"), f"{at}window")
        if data.get("format") != SNAPSHOT_FORMAT:
            raise SnapshotError(f"{at}format: must be {SNAPSHOT_FORMAT!r}, got {shown(data.get('format'))}")
        return cls(clock=Clock.from_dict(data.get("clock"), f"{at}clock"), engine=engine,
                   usage=_optional(KvUsage)(data.get("usage"), f"{at}usage"), window=window,
                   counters=counters,
                   wait_seconds_by_reason=_by_name(data.get("wait_seconds_by_reason"),
                                                   f"{at}wait_seconds_by_reason"),
                   hook_errors=_by_name(data.get("hook_errors"), f"{at}hook_errors"),
                   health=_optional(Health)(data.get("health"), f"{at}health"),
                   dropped=_optional(Dropped)(data.get("dropped"), f"{at}dropped"),
                   inferred=_texts_by_name(data.get("inferred"), f"{at}inferred"),
                   intake=_by_name(data.get("intake"), f"{at}intake"))


# --- JSON -----------------------------------------------------------------------------------------
def _json(value):
    """A section, or a fresh copy of a list or an object, as JSON-serialisable data (a tuple as a
    list)."""
    if isinstance(value, _Section):
        return value.to_dict()
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_finite(number) -> bool:
    """Not NaN, not an infinity, not an int too large for a float (10**400, which `math.isfinite`
    overflows on)."""
    return -sys.float_info.max <= number <= sys.float_info.max


def _check_object(value, where: str) -> None:
    if not isinstance(value, dict):
        raise SnapshotError(f"{where}: must be an object, got {shown(value)}")


def _number(value, where: str):
    """A figure: a finite number, or None (not observable)."""
    if value is None:
        return None
    if not _is_number(value):
        raise SnapshotError(f"{where}: must be a number or null, got {shown(value)}")
    if not _is_finite(value):
        raise SnapshotError(f"{where}: must be a finite number or null, got {shown(value)}")
    return value


def _finite(value, where: str):
    if not (_is_number(value) and _is_finite(value)):
        raise SnapshotError(f"{where}: must be a finite number, got {shown(value)}")
    return value


def _counter(value, where: str):
    """A counter: a finite number, or null where the source does not count it."""
    return None if value is None else _finite(value, where)


def _text(value, where: str):
    if value is not None and not isinstance(value, str):
        raise SnapshotError(f"{where}: must be a string or null, got {shown(value)}")
    return value


def _required_text(value, where: str):
    if not isinstance(value, str):
        raise SnapshotError(f"{where}: must be a string, got {shown(value)}")
    return value


def _flag(value, where: str):
    if value is not None and not isinstance(value, bool):
        raise SnapshotError(f"{where}: must be true, false or null, got {shown(value)}")
    return value


def _texts(value, where: str):
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SnapshotError(f"{where}: must be a list of strings or null, got {shown(value)}")
    return list(value)


def _numbers(value, where: str):
    if value is None:
        return None
    if not isinstance(value, list) or not all(_is_number(v) and _is_finite(v) for v in value):
        raise SnapshotError(f"{where}: must be a list of numbers, got {shown(value)}")
    return list(value)


def _by_name(value, where: str):
    """Counts or seconds by name (wait reason, hook, phase): an object of finite numbers, or
    None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SnapshotError(f"{where}: must be an object or null, got {shown(value)}")
    return {k: _finite(v, f"{where}.{k}") for k, v in value.items()}


def _texts_by_name(value, where: str):
    """Words by name (how each inferred figure was read): an object of strings, or None."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise SnapshotError(f"{where}: must be an object of strings or null, got {shown(value)}")
    return dict(value)


def _required_by_name(value, where: str):
    _check_object(value, where)
    return _by_name(value, where)


def _object(value, where: str):
    if value is not None and not isinstance(value, dict):
        raise SnapshotError(f"{where}: must be an object or null, got {shown(value)}")
    return value


def _required(cls):
    return cls.from_dict


def _optional(cls):
    return lambda value, where: None if value is None else cls.from_dict(value, where)


def _sections(cls):
    def read(value, where):
        if value is None:
            return None
        if not isinstance(value, list):
            raise SnapshotError(f"{where}: must be a list or null, got {shown(value)}")
        return [cls.from_dict(item, f"{where}[{i}]") for i, item in enumerate(value)]
    return read


_READERS = {
    "float": _finite, "int": _finite, "str": _required_text, "float | None": _number,
    "int | None": _number, "str | None": _text, "bool | None": _flag, "list[str] | None": _texts,
    "list[int] | None": _numbers, "dict[str, float] | None": _by_name,
    "dict[str, int] | None": _by_name, "dict[str, float]": _required_by_name,
    "dict | None": _object,
}


@cache
def _readers(cls) -> tuple:
    """(field name, reader) of a section, the reader chosen by the field's annotation."""
    out = []
    for f in fields(cls):
        kind = f.type
        # annotations are strings here (from __future__ import annotations)
        assert isinstance(kind, str)
        if kind in _READERS:
            read = _READERS[kind]
        elif kind.startswith("list[") and kind.endswith("] | None"):
            read = _sections(globals()[kind[5:-8]])
        elif kind.endswith(" | None"):
            read = _optional(globals()[kind[:-7]])
        else:
            read = _required(globals()[kind])
        out.append((f.name, read))
    return tuple(out)
