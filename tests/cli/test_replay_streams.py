"""`diagnose --replay` streams its bundle (issue 49 item 2): the frames go through the run's judgment as they are
read, so that its memory is the diagnosis window's, not the file's. A 400 MB bundle of 7,348 DGX frames peaked at
1.08 GB when every frame was held (bench/replay_memory.py prints the figures)."""

import json
import os
import tracemalloc

import pytest

from stagelens.bundle import read_bundle, stream_bundle
from stagelens.cli import run
from stagelens.engine_hooks.records.snapshot import EngineSnapshot
from stagelens.runtime import AgentRuntime
from tests.helpers.frame_builders import engine_snapshot
from tests.helpers.serve_api import DGX


@pytest.fixture(scope="module")
def dgx_frame() -> dict:
    """One frame of an 8-GPU node (some 55 KB of JSON) with a busy engine's snapshot."""
    runtime = AgentRuntime(nvml_snapshot=DGX, history=2)
    runtime.sampler.tick()
    frame = runtime.frames(None)[-1].to_dict()
    frame["engine"] = EngineSnapshot.from_dict(engine_snapshot()).to_dict()
    return frame


def _bundle(path, frame: dict, count: int):
    with open(path, "w") as f:
        f.write(json.dumps({"format": "stagelens-bundle/1", "created_unix": 0, "source": "test"}) + "\n")
        for i in range(count):
            frame.update(time_unix=1_800_000_000.0 + i, time_monotonic=float(i))
            f.write(json.dumps({"kind": "frame", "frame": frame}) + "\n")
            if i % 10 == 0:
                timeline = {"request_id": f"r{i}", "model": "m", "prompt_tokens": 10, "output_tokens": 5,
                            "arrival": i + 0.1, "first_token": i + 0.2, "finished": i + 0.5}
                f.write(json.dumps({"kind": "timeline", "timeline": timeline}) + "\n")
    return path


def _peak_of_diagnose(path) -> int:
    tracemalloc.start()
    try:
        assert run(["diagnose", "--replay", str(path)]) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_replay_holds_the_diagnosis_window_not_the_file(dgx_frame, tmp_path, capsys):
    """200 frames (11 MB) and 50: each replay's peak is about the same, a small part of the file. Holding every
    frame (before) peaked at over twice the file."""
    small, large = _bundle(tmp_path / "small.jsonl", dgx_frame, 50), _bundle(tmp_path / "large.jsonl", dgx_frame, 200)
    _peak_of_diagnose(small)        # the modules a replay imports, imported before the count
    small_peak, large_peak = _peak_of_diagnose(small), _peak_of_diagnose(large)
    size = os.path.getsize(large)
    assert large_peak < size / 4, f"a replay of {size} bytes peaked at {large_peak} bytes"
    assert large_peak < small_peak + size / 8, (small_peak, large_peak)
    assert "verdict" in capsys.readouterr().out.lower()


def test_a_streamed_bundle_gives_its_frames_one_at_a_time_and_its_records_once_read(dgx_frame, tmp_path):
    path = _bundle(tmp_path / "b.jsonl", dgx_frame, 12)
    bundle, frames = stream_bundle(str(path))
    assert bundle.timelines == [] and not isinstance(frames, list)
    times = [f.time_monotonic for f in frames]
    assert times == [float(i) for i in range(12)] and bundle.frames == []
    whole = read_bundle(str(path))
    assert [f.time_monotonic for f in whole.frames] == times and bundle.timelines == whole.timelines
    assert len(bundle.timelines) == 2
