"""Bundles that are not as written: a crash's torn last line is left out with one warning; any other bad
input (binary, endless, a directory, fields of the wrong type) is one line and UNKNOWN, never a traceback."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stagelens.bundle import MAX_LINE_BYTES, BundleWriter, engine_settings, read_bundle
from stagelens.errors import EXIT_UNKNOWN, UserError
from stagelens.frame import Frame, FrameError
from stagelens.lab.bundled_engine import EngineConfig
from tests.helpers.frame_builders import engine_snapshot, frame, node_sample

STAGELENS = str(Path(sys.executable).parent / "stagelens")
HEADER = '{"format": "stagelens-bundle/1", "source": "test"}\n'


def _stagelens(*args):
    return subprocess.run([STAGELENS, *args], capture_output=True, text=True, timeout=120)


def _bundle(path, n=3) -> bytes:
    writer = BundleWriter.open(str(path), source="test")
    for i in range(n):
        writer.on_frame(frame(i, engine_snapshot()), [])
    writer.close()
    return path.read_bytes()


def _frame_dict(**changes) -> dict:
    data = frame(0, engine_snapshot()).to_dict()
    data.update(changes)
    return data


def _one_error_line(proc, expected: str) -> None:
    assert proc.returncode == EXIT_UNKNOWN, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("stagelens: error: ") and expected in proc.stderr, proc.stderr


# --- the torn tail -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("keep", [1, 20, 0.5, -2])   # bytes of the last frame's line that reached the disk
def test_a_torn_last_line_keeps_every_whole_record(tmp_path, keep):
    path = tmp_path / "crash.jsonl"
    data = _bundle(path, n=4)
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    cut = last + (int((len(data) - last) * keep) if isinstance(keep, float) else keep % (len(data) - last))
    path.write_bytes(data[:cut])
    bundle = read_bundle(str(path))
    assert len(bundle.frames) == 3
    assert bundle.torn_tail.startswith(f"{path}:5: the last line is cut short ({cut - last} bytes of a")
    assert "replaying the 3 frames before it" in bundle.torn_tail


def test_a_last_line_whole_but_for_its_newline_is_kept(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_bytes(_bundle(path, n=4).rstrip(b"\n"))
    bundle = read_bundle(str(path))
    assert len(bundle.frames) == 4 and bundle.torn_tail is None


def test_a_torn_tail_replays_with_one_warning_line(tmp_path):
    path = tmp_path / "crash.jsonl"
    path.write_bytes(_bundle(path, n=4)[:-30])
    proc = _stagelens("diagnose", "--replay", str(path))
    assert proc.returncode == 0 and "verdict: ok" in proc.stdout
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"stagelens: warning: {path}:5: "), proc.stderr


def test_a_bad_line_in_the_middle_stays_an_error(tmp_path):
    path = tmp_path / "b.jsonl"
    lines = _bundle(path, n=4).splitlines(keepends=True)
    lines[2] = lines[2][:40] + b"\n"            # frame 2 cut short, frames after it
    path.write_bytes(b"".join(lines))
    with pytest.raises(UserError, match=r":3: not valid JSON"):
        read_bundle(str(path))
    _one_error_line(_stagelens("diagnose", "--replay", str(path)), f"{path}:3: not valid JSON")


def test_a_torn_header_is_not_a_bundle(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text(HEADER[:20])
    with pytest.raises(UserError, match=":1: not valid JSON"):
        read_bundle(str(path))


# --- inputs that are not bundles ---------------------------------------------------------------------------
def test_a_binary_file_is_one_line(tmp_path):
    path = tmp_path / "b.jsonl.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(256)) + b"\n")     # what gzip writes first
    _one_error_line(_stagelens("diagnose", "--replay", str(path)), f"{path}:1: not UTF-8 text")


def test_binary_in_a_middle_line_is_one_line(tmp_path):
    path = tmp_path / "b.jsonl"
    lines = _bundle(path).splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], b"\xff\xfe\n", *lines[2:]]))
    with pytest.raises(UserError, match=r":3: not UTF-8 text \(byte 0xff at column 1\)"):
        read_bundle(str(path))


def test_an_endless_line_is_refused_without_reading_it_all():
    with pytest.raises(UserError, match=f"/dev/zero:1: line 1 longer than {MAX_LINE_BYTES // 2**20} MiB"):
        read_bundle("/dev/zero")
    _one_error_line(_stagelens("diagnose", "--replay", "/dev/zero"), "/dev/zero:1: line 1 longer than")


def test_a_directory_is_one_line(tmp_path):
    with pytest.raises(UserError, match="is a directory"):
        read_bundle(str(tmp_path))
    _one_error_line(_stagelens("diagnose", "--replay", str(tmp_path)), "is a directory")


def test_json_nested_too_deeply_is_one_line(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text(HEADER + '{"kind": "frame", "frame": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(UserError, match=":2: not valid JSON: nested too deeply"):
        read_bundle(str(path))


# --- frames and timelines of the wrong shape ---------------------------------------------------------------
NODE = node_sample(0, gpus=[{"index": 0}]).to_dict()
WRONG_FRAMES = [
    ({"engine": "x"}, "engine: must be an object or null, got 'x'"),
    ({"time_unix": None}, "time_unix: must be a finite number, got null"),
    ({"time_unix": "1800000000"}, "time_unix: must be a finite number, got '1800000000'"),
    ({"time_monotonic": "12.5"}, "time_monotonic: must be a finite number, got '12.5'"),
    ({"time_unix": True}, "time_unix: must be a finite number, got True"),
    ({"time_unix": -1e300}, "time_unix: must be seconds since 1970"),
    ({"node": 7}, "node: must be a string, got 7"),
    ({"node_sample": [1, 2]}, "node_sample: must be an object or null, got [1, 2]"),
    ({"node_sample": {**NODE, "gpus": "GPU0"}}, "node_sample.gpus: must be a list or null, got 'GPU0'"),
    ({"node_sample": {**NODE, "gpus": [3]}}, "node_sample.gpus[0]: must be an object, got 3"),
    ({"collectors": {"name": "node"}}, "collectors: must be a list, got {'name': 'node'}"),
    ({"collectors": None}, "collectors: must be a list, got null"),
    ({"version": True}, "frame version True is not 1"),
    ({"engine": {}}, "engine.engine: must be an object, got null"),
    ({"engine": {**engine_snapshot(), "window": None}}, "engine.window: must be an object, got null"),
    ({"engine": {**engine_snapshot(), "counters": {"preemptions_total": "3"}}},
     "engine.counters.preemptions_total: must be a finite number, got '3'"),
    ({"engine": engine_snapshot(kv={"fragmentation_ratio": "0.4"})},
     "engine.window.kv.fragmentation_ratio: must be a number or null, got '0.4'"),
    ({"engine": engine_snapshot(kv={"sequence_lengths": [12, None]})},
     "engine.window.kv.sequence_lengths: must be a list of numbers"),
    ({"engine": engine_snapshot(scheduler={"wait_seconds_by_reason": {"no_free_blocks": None}})},
     "engine.window.scheduler.wait_seconds_by_reason.no_free_blocks: must be a finite number, got null"),
    ({"node_sample": {**NODE, "host": 3}}, "node_sample.host: must be an object or null, got 3"),
    ({"node_sample": {**NODE, "hostname": None}}, "node_sample.hostname: must be a string, got null"),
    ({"node_sample": {**NODE, "gpus": [{"index": 0, "pcie": {"rx_util_ratio": "0.4"}}]}},
     "node_sample.gpus[0].pcie.rx_util_ratio: must be a finite number or null, got '0.4'"),
    # a whole number no float holds: once an OverflowError (`math.isfinite`) in the reader
    ({"time_monotonic": 10**400}, "time_monotonic: must be a finite number, got a 1329-bit number"),
    ({"engine": {**engine_snapshot(), "counters": {"preemptions_total": 10**400}}},
     "engine.counters.preemptions_total: must be a finite number, got a 1329-bit number"),
    ({"engine": engine_snapshot(kv={"fragmentation_ratio": -(10**400)})},
     "engine.window.kv.fragmentation_ratio: must be a finite number or null, got a 1329-bit number"),
]


@pytest.mark.parametrize("changes, message", WRONG_FRAMES)
def test_a_frame_field_of_the_wrong_type_is_named(changes, message):
    with pytest.raises(FrameError, match=f"^{re.escape(message)}"):
        Frame.from_dict(_frame_dict(**changes))


@pytest.mark.parametrize("field, value", [("time_unix", math.nan), ("time_monotonic", math.inf),
                                          ("time_unix", -math.inf)])
def test_nan_and_infinity_in_a_time_are_named(tmp_path, field, value):
    """Python's json writes and reads NaN and Infinity, which JSON has not: a bundle may hold them."""
    line = json.dumps({"kind": "frame", "frame": _frame_dict(**{field: value})})
    assert "NaN" in line or "Infinity" in line
    path = tmp_path / "b.jsonl"
    path.write_text(HEADER + line + "\n")
    with pytest.raises(UserError, match=f":2: bad frame: {field}: must be a finite number, got -?(nan|inf)"):
        read_bundle(str(path))


@pytest.mark.parametrize("changes, message", [WRONG_FRAMES[0], WRONG_FRAMES[1], WRONG_FRAMES[2], WRONG_FRAMES[7],
                                              WRONG_FRAMES[10]])
def test_diagnose_replay_names_a_wrong_frame_in_one_line(tmp_path, changes, message):
    path = tmp_path / "b.jsonl"
    good = [json.dumps({"kind": "frame", "frame": frame(i, engine_snapshot()).to_dict()}) for i in range(2)]
    bad = json.dumps({"kind": "frame", "frame": _frame_dict(**changes)})
    path.write_text(HEADER + "\n".join([*good, bad]) + "\n")
    _one_error_line(_stagelens("diagnose", "--replay", str(path)), f"{path}:4: bad frame: {message}")


TIMELINE = {"request_id": "req-0", "prompt_tokens": 20, "output_tokens": 8, "arrival": 1.0, "finished": 2.0,
            "first_token": 1.5, "ttft_s": 0.5, "latency_s": 1.0,
            "waits": [{"start": 1.0, "end": 1.2, "reason": "no_free_blocks"}], "chunks": [{"start": 1.2, "end": 1.4}]}


SECONDS = "a finite number of seconds within 9.56e+10 of 0"


@pytest.mark.parametrize("timeline, message", [
    ("req-0", "must be an object, got 'req-0'"),
    ({**TIMELINE, "arrival": None}, f"arrival: must be {SECONDS}, got null"),
    ({**TIMELINE, "finished": "2.0"}, f"finished: must be {SECONDS} or null, got '2.0'"),
    ({**TIMELINE, "latency_s": [1]}, "latency_s: must be a finite number or null, got [1]"),
    ({**TIMELINE, "waits": {"start": 1}}, "waits: must be a list"),
    ({**TIMELINE, "waits": [{"start": 1.0, "end": 1.2}]}, "waits[0].reason: missing"),
    ({**TIMELINE, "chunks": [{"start": "1.2", "end": 1.4}]}, f"chunks[0].start: must be {SECONDS}, got '1.2'"),
    # what replay, the TUI and what-if read of it, and once let through to end in an internal error
    ({k: v for k, v in TIMELINE.items() if k != "request_id"}, "request_id: missing"),
    ({**TIMELINE, "request_id": {"id": 1}}, "request_id: must be a string, got {'id': 1}"),
    ({**TIMELINE, "arrival": 10**400}, f"arrival: must be {SECONDS}, got a 1329-bit number"),
    ({**TIMELINE, "prompt_tokens": 10**400}, "prompt_tokens: must be a whole number in [0, 2**40], got a 1329-bit"),
    ({**TIMELINE, "output_tokens": -8}, "output_tokens: must be a whole number in [0, 2**40], got -8"),
    # times no clock gives
    ({**TIMELINE, "arrival": -1e300}, f"arrival: must be {SECONDS}, got -1e+300"),
    ({**TIMELINE, "first_token": -199.0}, "first_token: -199.0 is before the arrival (1.0)"),
    ({**TIMELINE, "finished": 0.5}, "finished: 0.5 is before the arrival (1.0)"),
    ({**TIMELINE, "chunks": [{"start": 1.4, "end": 1.2}]}, "chunks[0]: ends (1.2) before it starts (1.4)"),
    ({**TIMELINE, "waits": [{"start": 1.2, "end": 1.0, "reason": "no_free_blocks"}]},
     "waits[0]: ends (1.0) before it starts (1.2)"),
])
def test_a_timeline_without_what_replay_reads_is_named(tmp_path, timeline, message):
    path = tmp_path / "b.jsonl"
    lines = [json.dumps({"kind": "frame", "frame": _frame_dict()}),
             json.dumps({"kind": "timeline", "timeline": timeline})]
    path.write_text(HEADER + "\n".join(lines) + "\n")
    with pytest.raises(UserError, match=f":3: bad timeline: {re.escape(message)}"):
        read_bundle(str(path))


def test_a_timeline_as_recorded_is_read(tmp_path):
    path = tmp_path / "b.jsonl"
    lines = [json.dumps({"kind": "frame", "frame": _frame_dict()}),
             json.dumps({"kind": "timeline", "timeline": TIMELINE}),
             json.dumps({"kind": "timeline", "timeline": {**TIMELINE, "finished": None, "waits": None}})]
    path.write_text(HEADER + "\n".join(lines) + "\n")
    assert len(read_bundle(str(path)).timelines) == 2


@pytest.mark.parametrize("timeline", [{k: v for k, v in TIMELINE.items() if k != "request_id"},
                                      {**TIMELINE, "arrival": 10**400}])
@pytest.mark.parametrize("command", ["diagnose", "tui", "whatif"])
def test_every_replay_refuses_a_timeline_replay_cannot_read_in_one_line(tmp_path, timeline, command):
    """Once let through by the reader: an internal error in `diagnose --replay` and `tui --replay`, the request left
    out silently by `whatif --replay`."""
    path = tmp_path / "b.jsonl"
    lines = [json.dumps({"kind": "frame", "frame": _frame_dict()}),
             *(json.dumps({"kind": "timeline", "timeline": t}) for t in (TIMELINE, timeline))]
    path.write_text(HEADER + "\n".join(lines) + "\n")
    _one_error_line(_stagelens(command, "--replay", str(path)), f"{path}:4: bad timeline: ")


def test_a_number_past_what_python_reads_is_one_line(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text(HEADER + '{"kind": "timeline", "timeline": {"arrival": ' + "9" * 5000 + "}}\n")
    _one_error_line(_stagelens("diagnose", "--replay", str(path)), f"{path}:2: not valid JSON for a bundle: a number")


# --- what the bundled engine's settings, steps and loads say -----------------------------------------------
ENGINE_CONFIG = engine_settings(EngineConfig(model="tiny", device="cpu", dtype="float32", max_model_len=256))
STEP = {"index": 1, "start": 5.0, "end": 5.01, "prefill_tokens": 64, "prefill_pairs": 4096, "decode_tokens": 0,
        "prefill_seqs": 1, "decode_seqs": 0, "kv_tokens_cached": 64, "kv_slots_reserved": 64, "waiting": 0,
        "running": 1, "preempted": 0, "loading": False, "forwards": 1}
LOAD = {"model": "model-1", "start": 4.0, "end": 4.5, "seconds": 0.5, "ok": True}


def _read_records(tmp_path, *records):
    path = tmp_path / "b.jsonl"
    path.write_text(HEADER + "".join(json.dumps(r) + "\n" for r in records))
    return read_bundle(str(path))


def test_the_bundled_engines_records_as_written_are_read(tmp_path):
    bundle = _read_records(tmp_path, {"kind": "engine_config", "engine_config": ENGINE_CONFIG},
                           {"kind": "steps", "steps": [STEP], "loads": [LOAD]},
                           {"kind": "engine_config", "engine_config": {**ENGINE_CONFIG, "kv_bytes_per_token": 256}})
    assert bundle.steps == [STEP] and bundle.loads == [LOAD]
    assert bundle.engine_config["kv_bytes_per_token"] == 256        # a float16 recording of the same model


@pytest.mark.parametrize("changes, message", [
    ({"kv_bytes_per_token": 0}, "kv_bytes_per_token: must be what a token of model 'tiny' takes (256 or 512 bytes), "
                                "got 0"),
    ({"kv_bytes_per_token": -512}, "kv_bytes_per_token: must be what a token of model 'tiny' takes"),
    ({"kv_bytes_per_token": 1}, "kv_bytes_per_token: must be what a token of model 'tiny' takes"),
    ({"kv_bytes_per_token": "512"}, "kv_bytes_per_token: must be a whole number, got '512'"),
    ({"kv_bytes_per_token": math.nan}, "kv_bytes_per_token: must be a whole number, got nan"),
    ({"enable_chunked_prefill": "no"}, "enable_chunked_prefill: must be true or false, got 'no'"),
    ({"policy": None}, "policy: must be a string, got null"),
    ({"max_num_seqs": 0}, "--max-num-seqs: must be a whole number in [1, 1024] requests, got 0"),
    ({"kv_cache_memory": 10**400}, "--kv-cache-memory: must be a whole number in [1, 1099511627776] bytes, got a "
                                   "1329-bit number"),
    ({"model": "giant"}, "--model: unknown preset 'giant'"),
    ({"block_size": None, "kv_cache_memory": None}, "block_size: must be a whole number, got null"),
])
def test_an_engine_config_the_simulator_cannot_run_on_is_named(tmp_path, changes, message):
    with pytest.raises(UserError, match=f":2: bad engine_config: {re.escape(message)}"):
        _read_records(tmp_path, {"kind": "engine_config", "engine_config": {**ENGINE_CONFIG, **changes}})


def test_an_engine_config_without_a_setting_is_named(tmp_path):
    config = {k: v for k, v in ENGINE_CONFIG.items() if k != "max_model_len"}
    with pytest.raises(UserError, match=":2: bad engine_config: max_model_len: missing"):
        _read_records(tmp_path, {"kind": "engine_config", "engine_config": config})


@pytest.mark.parametrize("record, message", [
    ({"steps": [{**STEP, "end": 4.0}]}, "steps[0]: ends (4.0) before it starts (5.0)"),
    ({"steps": [{**STEP, "start": -1e300}]}, "steps[0].start: must be a finite number of seconds within 9.56e+10 of 0"),
    ({"steps": [{**STEP, "prefill_tokens": -64}]}, "steps[0].prefill_tokens: must be a finite number in [0, 2**53]"),
    ({"steps": [{**STEP, "loading": "no"}]}, "steps[0].loading: must be true or false, got 'no'"),
    ({"steps": [STEP], "loads": [{**LOAD, "end": 3.0}]}, "loads[0]: ends (3.0) before it starts (4.0)"),
    ({"steps": [STEP], "loads": [{**LOAD, "model": {"name": "m"}}]}, "loads[0].model: must be a string"),
])
def test_steps_and_loads_no_engine_could_have_run_are_named(tmp_path, record, message):
    with pytest.raises(UserError, match=f":2: bad steps: {re.escape(message)}"):
        _read_records(tmp_path, {"kind": "steps", **record})
