"""Tail attribution: hand-built timelines with known components give exact splits; the tail of a set of
requests is added up and charged to stages; a run is judged by the stage its P99 tail blames, with the
episodes of each stage, not only by its last window."""

import dataclasses

import pytest

from stagelens.diagnosis.tail import Tail, by_stage
from stagelens.diagnosis.whole_run import judge_run
from stagelens.engine_hooks.records import waits
from stagelens.engine_hooks.records.attribution import COMPUTE, LOAD_SLOWDOWN, RECOMPUTE, SlowStep, components, tail
from stagelens.engine_hooks.records.snapshot import WindowTail
from stagelens.engine_hooks.records.timeline import (
    BEHIND_LONG_PREFILL,
    QUEUED,
    STEP_BOUNDARY,
    PrefillChunk,
    RequestTimeline,
    Wait,
)
from stagelens.tui.app import StagelensApp
from stagelens.tui.feed import Poll
from stagelens.tui.messages import Polled
from stagelens.vocabulary import COMPONENT_STAGE, WAIT_STAGE
from tests.helpers.frame_builders import engine_snapshot, frame
from tests.helpers.tui_pilot import FakeFeed
from tests.helpers.tui_support import text_of


def timeline(rid="r", arrival=0.0, waits_=(), chunks=(), first=None, finished=None, events=()) -> RequestTimeline:
    t = RequestTimeline(rid, "model-0", 64, 8, arrival=arrival, finished=finished, first_token=first,
                        finish_reason="length" if finished is not None else None)
    t.waits = [Wait(a, b, reason) for a, b, reason in waits_]
    t.chunks = [PrefillChunk(a, b, 64, i) for i, (a, b) in enumerate(chunks)]
    t.events = [(arrival, "arrival"), *events]
    return t


def test_waits_and_compute_split_the_interval_exactly():
    t = timeline(waits_=[(0.0, 1.0, waits.MODEL_LOADING), (1.0, 1.5, waits.TOKEN_BUDGET)], chunks=[(1.5, 1.7)],
                 first=1.7, finished=3.0)
    ttft = components(t, 1.7)
    assert ttft == pytest.approx({waits.MODEL_LOADING: 1.0, waits.TOKEN_BUDGET: 0.5, COMPUTE: 0.2})
    latency = components(t, 3.0)
    assert latency == pytest.approx({waits.MODEL_LOADING: 1.0, waits.TOKEN_BUDGET: 0.5, COMPUTE: 1.5})
    assert sum(latency.values()) == pytest.approx(3.0)


def test_prefill_run_again_after_a_preemption_is_recompute():
    t = timeline(waits_=[(0.0, 0.2, STEP_BOUNDARY), (1.0, 1.6, waits.PREEMPTED)],
                 chunks=[(0.2, 0.5), (1.6, 1.9)], first=0.5, finished=2.5, events=[(1.0, "preempted")])
    parts = components(t, 2.5)
    assert parts == pytest.approx({STEP_BOUNDARY: 0.2, waits.PREEMPTED: 0.6, RECOMPUTE: 0.3, COMPUTE: 1.4})
    assert by_stage(parts) == pytest.approx({"compute": 1.6, "kv_cache": 0.9})


def test_steps_slowed_by_a_load_count_only_while_the_request_ran():
    t = timeline(waits_=[(0.0, 1.0, waits.TOKEN_BUDGET)], chunks=[(1.0, 1.1)], first=1.1, finished=2.0)
    slow = [SlowStep(0.5, 0.6, 0.08),     # while it waited: not its time
            SlowStep(1.2, 1.3, 0.05), SlowStep(1.3, 1.4, 0.07)]
    parts = components(t, 2.0, slow)
    assert parts[LOAD_SLOWDOWN] == pytest.approx(0.12)
    assert sum(parts.values()) == pytest.approx(2.0)


def test_every_reason_the_engine_names_is_charged_somewhere():
    named = {waits.NO_FREE_BLOCKS, waits.TOKEN_BUDGET, waits.MAX_NUM_SEQS, waits.MODEL_LOADING, waits.PREEMPTED,
             BEHIND_LONG_PREFILL, STEP_BOUNDARY, QUEUED}
    assert set(WAIT_STAGE) == named
    assert {RECOMPUTE, LOAD_SLOWDOWN, COMPUTE} <= set(COMPONENT_STAGE)


def _population(n_fast=49, slow_wait=2.0, reason=waits.MODEL_LOADING):
    """`n_fast` requests with a 0.1 s TTFT of compute, and one that waited `slow_wait` first."""
    out = []
    for i in range(n_fast):
        t = timeline(f"f{i}", arrival=float(i), chunks=[(i, i + 0.1)], first=i + 0.1, finished=i + 0.5)
        out.append(t)
    slow = timeline("slow", arrival=200.0, waits_=[(200.0, 200.0 + slow_wait, reason)],
                    chunks=[(200.0 + slow_wait, 200.1 + slow_wait)], first=200.1 + slow_wait,
                    finished=200.5 + slow_wait)
    out.append(slow)
    for t in out:
        t.ttft_components = components(t, t.first_token)
        t.latency_components = components(t, t.finished)
    return out


def test_the_tail_is_the_slowest_percent_and_its_time_is_charged_to_stages():
    figures = tail(_population(), "ttft", 0.99)
    assert figures.requests == 1 and figures.of_requests == 50
    found = Tail.from_figures("ttft", figures)
    assert found.share("cold_path") == pytest.approx(2.0 / 2.1)
    assert found.slow and found.blamed == "cold_path"
    assert found.sentence().startswith("P99 TTFT ")
    assert "95% of their time was cold path (model loads), 5% compute" in found.sentence()


def test_a_fast_tail_blames_no_one():
    found = Tail.from_figures("ttft", tail(_population(slow_wait=0.05), "ttft", 0.99))
    assert not found.slow and found.blamed is None


def _tail_json(timelines) -> dict:
    """The window's `tail` of a snapshot's JSON, over `timelines`."""
    return WindowTail(ttft=tail(timelines, "ttft"), latency=tail(timelines, "latency")).to_dict()


def _frames_and_tail(timelines):
    engine = engine_snapshot()
    engine["window"]["tail"] = _tail_json(timelines)
    return [frame(t, engine) for t in range(5)]


def test_a_run_whose_last_window_is_healthy_is_still_blamed_on_its_tail():
    """The cold start of the issue: the slow requests waited on loads early; the last window looks fine."""
    timelines = _population()
    frames = [frame(t, engine_snapshot()) for t in range(6)]        # every window healthy
    run = judge_run(frames, timelines)
    assert run.at_end.verdict == "ok"
    assert run.basis == "tail" and run.diagnosis.root_stage == "cold_path"
    assert run.diagnosis.stage("cold_path").state == "firing"
    assert run.diagnosis.stage("cold_path").evidence[0].signal == "cold_path_tail_share"
    assert any("--num-preload-models" in r.text for r in run.diagnosis.stage("cold_path").recommendations)


def test_a_fault_that_stops_halfway_is_an_episode_with_its_interval():
    hol = dict(scheduler={"decided_wait_p99_s": 0.9, "head_of_line_share": 0.8, "waiting_share": 0.6,
                          "wait_seconds_by_reason": {"behind_long_prefill": 4.0}})
    frames = [frame(t, engine_snapshot(**(hol if 3 <= t < 9 else {}))) for t in range(16)]
    run = judge_run(frames, [])
    episodes = [e for e in run.episodes if e.stage == "scheduler"]
    assert len(episodes) == 1
    ep = episodes[0]
    assert ep.state == "firing" and not ep.open
    base = frames[0].time_unix
    assert ep.start_unix - base == 3           # its first firing sample: warn until the second confirms it
    assert 9 <= ep.end_unix - base <= 11       # three to clear
    assert ep.peak.signal in ("scheduler_wait_p99", "head_of_line_blocking")
    assert run.basis == "end" and run.diagnosis.verdict == "ok"


@pytest.mark.asyncio
async def test_the_tui_shows_the_tails_split_for_the_slowest_requests():
    timelines = _population()
    frames = _frames_and_tail(timelines)
    app = StagelensApp(FakeFeed(), autopoll=False)
    async with app.run_test(size=(160, 48)) as pilot:
        last = timelines[-1]
        shift = frames[-1].time_monotonic - last.finished       # finished inside the last frame's window
        slow = dataclasses.replace(last, arrival=last.arrival + shift, finished=last.finished + shift,
                                   first_token=last.first_token + shift if last.first_token is not None else None)
        app.post_message(Polled(Poll(frames, [slow])))
        await pilot.pause()
        screen = text_of(app)
    assert "tail: P99 TTFT" in screen and "cold path (model loads)" in screen
    assert "cold 80%" in screen        # its latency: 2.0 s of model loads in 2.5 s


@pytest.mark.slow
def test_the_issues_cold_start_run_is_diagnosed_cold_path_with_its_tail_on_model_loads(model_dir):
    """`lab --models 2 --num-preload-models 0 --max-resident-models 1 ...` once printed `verdict: ok`
    beside a P99 TTFT 20x its median: the slow requests had waited on model loads early in the run."""
    import json
    import subprocess

    from tests.helpers.serve_support import stagelens_command

    out = subprocess.run([*stagelens_command(), "lab", "--models", "2", "--num-preload-models", "0",
                          "--max-resident-models", "1", "--prompt-len", "64", "--output-len", "16", "--rate", "2",
                          "--duration", "12", "--seed", "9", "--device", "cpu", "--model-dir", model_dir, "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    run = result["run"]
    assert run["tail"]["slow"] and run["tail"]["blamed"] == "cold_path", run["tail"]
    assert run["tail"]["components"]["model_loading"] > 0.5 * sum(run["tail"]["components"].values())
    assert result["diagnosis"]["root_stage"] == "cold_path" and result["diagnosis"]["verdict"] == "firing"
    assert any(e["stage"] == "cold_path" for e in run["episodes"]) and run["tail_episodes"]
    assert result["model_loads"] >= 1 and result["model_load_seconds_max"] > 0


def test_live_the_root_is_the_stage_the_tail_blames_and_a_disagreement_is_said():
    """Two stages firing; the window's tail is mostly model loads: the cold path is the root. Before the
    cold path's state has caught up, the signals' root stands and the disagreement is said."""
    from stagelens.diagnosis import diagnose
    from stagelens.diagnosis.config import load_config

    timelines = _population()
    hol = dict(scheduler={"decided_wait_p99_s": 0.9, "head_of_line_share": 0.8, "waiting_share": 0.6,
                          "wait_seconds_by_reason": {"behind_long_prefill": 4.0}})
    frames = []
    for t in range(8):
        engine = engine_snapshot(**hol)
        if t >= 2:     # the scheduler fired first; the slow requests arrive later
            engine["window"]["tail"] = _tail_json(timelines)
        frames.append(frame(t, engine))
    d = diagnose(frames)
    assert d.stage("scheduler").state == d.stage("cold_path").state == "firing"
    assert d.root_stage == "cold_path" and d.disagreement is None
    # the first sample with the slow tail: the cold path has not yet held its level for `rise` samples (warn)
    d = diagnose(frames[:3])
    assert d.root_stage == "scheduler" and d.stage("cold_path").state == "warn"
    assert d.disagreement.startswith("the window's P99 tail blames cold_path, the signals point at scheduler")
    config = load_config(overrides=["cold_path_tail_share=0.3:0.99"])
    d = diagnose(frames, config)
    assert d.root_stage == "scheduler" and d.disagreement is None   # past its threshold, the tail blames no one
