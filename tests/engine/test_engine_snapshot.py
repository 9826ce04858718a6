"""The typed engine snapshot (engine_hooks/records/snapshot.py): JSON both ways as docs/snapshot.md writes it, checked
on read with the field named; and None as "not observable", which every surface shows as unknown, never ok."""

import copy
import json
import math
from pathlib import Path

import pytest

from stagelens.bundle import read_bundle
from stagelens.diagnosis import diagnose
from stagelens.diagnosis.signals import SIGNALS
from stagelens.engine_hooks.records.snapshot import (
    Clock,
    ColdPathFigures,
    Counters,
    EngineInfo,
    EngineSnapshot,
    KvFigures,
    SchedulerFigures,
    SnapshotError,
    Window,
    WindowTail,
)
from stagelens.frame import Frame, FrameError
from stagelens.metrics import MetricsExporter
from stagelens.tui.app import StagelensApp
from stagelens.tui.feed import Poll
from tests.helpers.exposition import parse
from tests.helpers.frame_builders import engine_snapshot, frame
from tests.helpers.tui_pilot import FakeFeed, inject
from tests.helpers.tui_support import text_of

BUNDLES = Path(__file__).parents[1] / "fixtures" / "bundles"
NODE_SIGNALS = {"memory_bandwidth_utilisation", "pcie_backpressure", "threads_blocked_on_data"}   # the node's


@pytest.fixture(scope="module")
def real(model_dir) -> list[EngineSnapshot]:
    """Snapshots of a tiny engine: before its first step, then while it prefills, decodes, preempts (17 KV blocks
    for 6 requests) and loads a second model, and once it is done."""
    import time

    from stagelens.engine_hooks import RecorderConfig, instrument, uninstrument
    from stagelens.engine_hooks.engine import EngineConfig, LLMEngine, SamplingParams

    engine = LLMEngine(EngineConfig(model="tiny", model_dir=model_dir, max_model_len=256, kv_cache_memory=8192 * 17,
                                    max_num_batched_tokens=256, max_num_seqs=8, device="cpu", models=2,
                                    num_preload_models=1))
    rec = instrument(engine, RecorderConfig(usage_interval_s=0.0))
    snaps = [rec.snapshot()]
    try:
        with engine:
            requests = [engine.submit([i + 1] * 40, SamplingParams(max_tokens=40), model="model-0") for i in range(6)]
            requests.append(engine.submit([7] * 10, SamplingParams(max_tokens=4), model="model-1"))
            while not all(r.finished for r in requests):
                snaps.append(rec.snapshot())
                time.sleep(0.02)
        snaps.append(rec.snapshot())
    finally:
        uninstrument(engine)
    return snaps


def _json(value):
    return json.loads(json.dumps(value))


# --- JSON both ways ------------------------------------------------------------------------------------------
def test_a_real_snapshot_round_trips_through_json(real):
    for snap in real:
        data = snap.to_dict()
        assert EngineSnapshot.from_dict(_json(data)).to_dict() == _json(data)
    last = real[-1]
    assert last.counters.preemptions_total and last.counters.loads_total == 1, "the run should preempt and load"
    f = Frame(time_unix=1_800_000_000.0, time_monotonic=last.clock.monotonic, node="n", engine=last)
    assert Frame.from_dict(_json(f.to_dict())).to_dict() == _json(f.to_dict())


def test_a_counter_is_absent_until_it_counts_and_reads_as_zero(real):
    first, last = real[0], real[-1]
    assert first.usage is None and first.to_dict()["counters"] == {}        # before the first step
    assert first.counters.steps_total == 0 and first.counters.preemptions_total == 0
    again = EngineSnapshot.from_dict(_json(first.to_dict()))
    assert again.counters.steps_total == 0 and again.to_dict()["counters"] == {}
    counted = last.to_dict()["counters"]
    assert counted["steps_total"] == last.counters.steps_total > 0
    assert "requests_failed_total" not in counted and last.counters.requests_failed_total == 0


def test_the_json_has_the_documented_sections(real):
    data = real[-1].to_dict()
    assert list(data) == ["format", "clock", "engine", "usage", "window", "counters", "wait_seconds_by_reason",
                          "hook_errors", "health", "dropped", "inferred", "intake"]
    assert list(data["window"]) == ["span_s", "kv", "scheduler", "cold_path", "tail"]
    assert data["format"] == "stagelens-engine/1" and set(data["window"]["tail"]) == {"ttft", "latency"}


@pytest.mark.parametrize("name", ["cold-load", "healthy", "hol-blocking", "kv-fragmentation"])
def test_every_recorded_bundle_reads_and_writes_back_as_recorded(name):
    path = BUNDLES / f"{name}.jsonl"
    bundle = read_bundle(str(path))
    assert bundle.frames and all(isinstance(f.engine, EngineSnapshot) for f in bundle.frames)
    written = [json.loads(line)["frame"] for line in path.read_text().splitlines()
               if json.loads(line).get("kind") == "frame"]
    for frame_, original in zip(bundle.frames, written, strict=True):
        again = frame_.to_dict()
        # these bundles predate the engine's health, the window's tail, the source and what it inferred: read as
        # not observable, written as null
        assert again["engine"].pop("health") is None and again["engine"]["window"].pop("tail") is None
        assert again["engine"].pop("inferred") is None and again["engine"]["engine"].pop("source") is None
        assert again["engine"].pop("intake") is None
        kv = again["engine"]["window"]["kv"]
        assert [kv.pop(k) for k in ("blocks_stored", "blocks_removed", "blocks_restored", "block_lifetime_p50_s",
                                    "full_while_waiting_share", "preemptions_per_request", "tokens_per_request",
                                    "most_running", "prefix_hit_share")] == [None] * 9
        scheduler, info = again["engine"]["window"]["scheduler"], again["engine"]["engine"]
        assert [scheduler.pop(k) for k in ("decided_wait_p99_at_least_s", "decided_wait_p99_at_most_s",
                                           "no_step_for_s", "decided_wait_estimate_s", "cut_at_length_share",
                                           "failed_share", "spec_acceptance")] == [None] * 7
        assert [info.pop(k) for k in ("generation", "kv_capacity_tokens", "kv_capacity_lever", "block_size_forced",
                                      "enable_prefix_caching")] == [None] * 5
        assert again == original


def test_keys_it_does_not_know_are_ignored(real):
    data = _json(real[-1].to_dict())
    data["added_later"] = {"x": 1}
    data["window"]["kv"]["new_figure"] = "text"
    data["counters"]["new_total"] = "3"
    assert EngineSnapshot.from_dict(data).to_dict() == _json(real[-1].to_dict())


# --- input that is not as written ------------------------------------------------------------------------------
def _set(path: str, value):
    def change(data):
        *parents, key = path.split(".")
        for p in parents:
            data = data[p]
        if value is _DELETE:
            del data[key]
        else:
            data[key] = value
    return change


_DELETE = object()

BAD = [
    ("window.kv.fragmentation_ratio", "0.4", "window.kv.fragmentation_ratio: must be a number or null, got '0.4'"),
    ("window.scheduler.decided_wait_p99_s", math.nan,
     "window.scheduler.decided_wait_p99_s: must be a finite number or null, got nan"),
    ("window.scheduler.steps", True, "window.scheduler.steps: must be a number or null, got True"),
    ("window.span_s", math.inf, "window.span_s: must be a finite number, got inf"),
    ("window.scheduler", _DELETE, "window.scheduler: must be an object, got null"),
    ("window", _DELETE, "window: must be an object, got null"),
    ("clock", _DELETE, "clock: must be an object, got null"),
    ("clock.wall", "now", "clock.wall: must be a finite number, got 'now'"),
    ("counters.steps_total", math.nan, "counters.steps_total: must be a finite number, got nan"),
    ("counters", [], "counters: must be an object, got []"),
    ("engine.device", 3, "engine.device: must be a string or null, got 3"),
    ("engine.enable_chunked_prefill", "yes", "engine.enable_chunked_prefill: must be true, false or null, got 'yes'"),
    ("engine.resident_models", "model-0", "engine.resident_models: must be a list of strings or null"),
    ("window.kv.sequence_lengths", [12, None], "window.kv.sequence_lengths: must be a list of numbers"),
    ("window.cold_path.loads_in_progress", [{"since": 1.0}],
     "window.cold_path.loads_in_progress[0].model: must be a string, got null"),
    ("window.scheduler.wait_seconds_by_reason", {"no_free_blocks": None},
     "window.scheduler.wait_seconds_by_reason.no_free_blocks: must be a finite number, got null"),
    ("window.tail.ttft.seconds", {"compute": "1"}, "window.tail.ttft.seconds.compute: must be a finite number"),
    ("window.tail.latency", [], "window.tail.latency: must be an object, got []"),
    ("health.step_errors", {"forward": math.inf}, "health.step_errors.forward: must be a finite number, got inf"),
    ("usage", [], "usage: must be an object, got []"),
    ("usage.num_blocks", "17", "usage.num_blocks: must be a number or null, got '17'"),
    ("dropped.steps", -math.inf, "dropped.steps: must be a finite number or null, got -inf"),
    ("format", "stagelens-engine/2", "format: must be 'stagelens-engine/1', got 'stagelens-engine/2'"),
]


@pytest.mark.parametrize("path, value, message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_naming_the_field(real, path, value, message):
    data = copy.deepcopy(real[-1].to_dict())
    assert data["window"]["tail"]["ttft"] is not None
    _set(path, value)(data)
    with pytest.raises(SnapshotError) as refused:
        EngineSnapshot.from_dict(data)
    assert str(refused.value).startswith(message)
    frame_data = frame(0).to_dict() | {"engine": data}
    with pytest.raises(FrameError) as refused:
        Frame.from_dict(frame_data)
    assert str(refused.value).startswith(f"engine.{message}")


# --- not observable -------------------------------------------------------------------------------------------
def blind(tail: WindowTail | None = None, t: float = 0.0) -> EngineSnapshot:
    """What a source that observes nothing sends: every figure None, every counter not counted."""
    return EngineSnapshot(clock=Clock(monotonic=t, wall=1_800_000_000.0 + t), engine=EngineInfo(),
                          window=Window(span_s=10.0, kv=KvFigures(), scheduler=SchedulerFigures(),
                                        cold_path=ColdPathFigures(), tail=tail),
                          counters=Counters())


def test_a_blind_snapshot_round_trips_with_nulls():
    data = blind(WindowTail()).to_dict()
    assert set(data["counters"].values()) == {None} and data["health"] is None
    assert data["window"]["kv"]["fragmentation_ratio"] is None and data["window"]["tail"] == {"ttft": None,
                                                                                               "latency": None}
    assert EngineSnapshot.from_dict(_json(data)).to_dict() == data


@pytest.mark.parametrize("tail", [None, WindowTail()], ids=["no tail", "a tail of nothing"])
def test_figures_not_observable_are_unknown_never_ok(tail):
    d = diagnose([frame(t, blind(tail, t)) for t in range(5)])
    states = {e.signal: e.state for s in d.stages for e in s.evidence}
    engine_signals = {s.id for s in SIGNALS} - NODE_SIGNALS
    assert {states[s] for s in engine_signals} == {"unknown"}, states
    assert {s.state for s in d.stages} == {"unknown"} and d.verdict == "unknown"


def test_an_observed_idle_engine_is_ok_where_a_blind_one_is_unknown():
    """The difference is in the counts: no step, no request, no load observed is a situation absent."""
    idle = engine_snapshot(kv={k: None for k in ("fragmentation_ratio", "access_efficiency",
                                                 "effective_bandwidth_ratio", "bandwidth_swing_cv")},
                           scheduler={"steps": 0, "requests_finished": 0, "running": 0, "decided_wait_p99_s": None,
                                      "head_of_line_share": None, "waiting_share": None})
    d = diagnose([frame(t, idle) for t in range(5)])
    assert d.verdict == "ok"
    states = {e.signal: e.state for s in d.stages for e in s.evidence}
    for signal in ("kv_fragmentation_ratio", "scheduler_wait_p99", "head_of_line_blocking", "compute_utilisation",
                   "step_time_inflation"):
        assert states[signal] == "ok", signal


def test_metrics_leave_out_what_is_not_observed():
    frames = [frame(t, blind(WindowTail(), t)) for t in range(3)]
    exporter = MetricsExporter(lambda: frames[-1], lambda: diagnose(frames))
    samples = parse(exporter.render()[0])
    names = {name for name, _ in samples}
    assert samples[("stagelens_engine_attached", frozenset())] == 1
    assert samples[("stagelens_engine_window_seconds", frozenset())] == 10.0
    for absent in ("stagelens_kv_fragmentation_ratio", "stagelens_scheduler_steps_total", "stagelens_engine_up",
                   "stagelens_model_loads_total", "stagelens_hook_errors_total", "stagelens_tail_seconds"):
        assert absent not in names, absent
    assert samples[("stagelens_diagnosis_verdict_state", frozenset())] == -1


@pytest.mark.asyncio
async def test_the_tui_shows_a_blind_engine_without_error():
    app = StagelensApp(FakeFeed(), autopoll=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await inject(app, pilot, Poll([frame(t, blind(None, t)) for t in range(3)]))
        screen = text_of(app)
        assert "UNKNOWN" in screen and "? allocator" in screen and "waits: not observed" in screen
