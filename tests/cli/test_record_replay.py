"""Bundles: what the lab records replays into the same diagnosis; bad bundles are named by file and line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stagelens.bundle import BundleWriter, read_bundle
from stagelens.diagnosis import diagnose
from stagelens.errors import EXIT_UNKNOWN, UserError
from tests.helpers.frame_builders import engine_snapshot, frame

STAGELENS = str(Path(sys.executable).parent / "stagelens")


def _stagelens(*args, timeout=180):
    return subprocess.run([STAGELENS, *args], capture_output=True, text=True, timeout=timeout)


def _write_bundle(path, frames):
    writer = BundleWriter.open(str(path), source="test")
    for f in frames:
        writer.on_frame(f, [])
    writer.close()


def test_each_frame_is_on_disk_as_soon_as_it_is_written(tmp_path):
    path = tmp_path / "live.jsonl"
    writer = BundleWriter.open(str(path), source="test")
    writer.on_frame(frame(0, engine_snapshot()), [])
    assert len(read_bundle(str(path)).frames) == 1      # readable while the writer is still open
    writer.on_frame(frame(1, engine_snapshot()), [])
    assert len(read_bundle(str(path)).frames) == 2
    writer.close()


def test_lab_record_replays_to_the_same_verdict(tmp_path, model_dir):
    bundle = tmp_path / "lab.jsonl"
    proc = _stagelens("lab", "--json", "--model", "tiny", "--max-model-len", "256", "--kv-cache-memory", "1MiB",
                      "--allocator", "contiguous", "--rate", "30", "--duration", "4", "--interval", "0.5",
                      "--prompt-len", "uniform:8:40", "--output-len", "uniform:8:24", "--model-dir", model_dir,
                      "--record", str(bundle))
    assert proc.returncode == 0, proc.stderr
    lab = json.loads(proc.stdout)
    loaded = read_bundle(str(bundle))
    assert len(loaded.frames) >= 6 and loaded.timelines
    assert {t["request_id"] for t in loaded.timelines} <= {f"req-{i}" for i in range(lab["requests_submitted"])}
    replay = _stagelens("diagnose", "--json", "--replay", str(bundle))
    replayed = json.loads(replay.stdout)
    assert replayed["stages"][0]["stage"] == "kv_cache"
    assert replayed["stages"][0]["state"] == lab["diagnosis"]["stages"][0]["state"] == "firing"
    assert replay.returncode == 2


def test_diagnose_exit_codes_follow_the_verdict(tmp_path):
    healthy, firing = tmp_path / "healthy.jsonl", tmp_path / "firing.jsonl"
    _write_bundle(healthy, [frame(i, engine_snapshot()) for i in range(4)])
    _write_bundle(firing, [frame(i, engine_snapshot(kv={"fragmentation_ratio": 0.6})) for i in range(4)])
    warn = tmp_path / "warn.jsonl"
    _write_bundle(warn, [frame(i, engine_snapshot(kv={"fragmentation_ratio": 0.25})) for i in range(4)])
    assert _stagelens("diagnose", "--replay", str(healthy)).returncode == 0
    assert _stagelens("diagnose", "--replay", str(warn)).returncode == 1
    out = _stagelens("diagnose", "--replay", str(firing))
    assert out.returncode == 2 and "root stage: kv_cache" in out.stdout and "--allocator" not in out.stderr


def test_nothing_to_collect_exits_3():
    proc = _stagelens("diagnose", "--duration", "1")
    assert proc.returncode == 3 and "nothing to diagnose" in proc.stderr and "Traceback" not in proc.stderr
    proc = _stagelens("diagnose", "--connect", "http://127.0.0.1:9")
    assert proc.returncode == 3 and "could not collect" in proc.stderr


def test_diagnose_connect_refuses_thresholds_it_would_not_apply():
    proc = _stagelens("diagnose", "--connect", "http://127.0.0.1:9", "--threshold", "kv_fragmentation_ratio=0.1:0.2")
    assert proc.returncode == EXIT_UNKNOWN and "the server judges" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("content, where", [
    ("", ":1: not valid JSON"),
    ('{"format": "other"}\n', ":1: not a stagelens bundle"),
    ('{"format": "stagelens-bundle/1"}\n{"kind": "frame", "frame": {"version": 1}}\n', ":2: bad frame"),
    ('{"format": "stagelens-bundle/1"}\n\n{"kind": "frame"\n', ":3: not valid JSON"),
    ('{"format": "stagelens-bundle/1"}\n{"kind": "video"}\n', ":2: unknown record kind"),
])
def test_a_malformed_bundle_names_file_and_line(tmp_path, content, where):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(UserError, match=where):
        read_bundle(str(path))
    proc = _stagelens("diagnose", "--replay", str(path))
    assert proc.returncode == EXIT_UNKNOWN and f"{path}{where}" in proc.stderr and "Traceback" not in proc.stderr


def test_bundle_frames_diagnose_like_the_originals(tmp_path):
    frames = [frame(i, engine_snapshot(scheduler={"head_of_line_share": 0.7})) for i in range(5)]
    path = tmp_path / "b.jsonl"
    _write_bundle(path, frames)
    assert diagnose(read_bundle(str(path)).frames).to_dict() == diagnose(frames).to_dict()
    assert os.path.getsize(path) > 0
