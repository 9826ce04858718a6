"""A replay takes in at most what agent/replay_limits.py states, and past it is one line and UNKNOWN before memory
grows, not read until it runs out (1,000,000 requests ran past 60 s at 1.7 GB; a 2 GB bundle held 4 GB): a
bundle's bytes (known before a byte is read, or counted as a pipe gives them), its request timelines, the models
the requests name. A 10-minute recording at 50 requests a second is well within."""

import json
import os
import threading

import pytest

from stagelens.bundle import read_bundle
from stagelens.errors import UserError
from stagelens.replay_limits import MAX_BUNDLE_BYTES, MAX_REPLAY_MODELS, MAX_REPLAY_OUTPUT_TOKENS, MAX_REPLAY_REQUESTS
from stagelens.whatif.workload import observed_from_window
from tests.helpers.cli_run import assert_one_line_error, stagelens

HEADER = '{"format": "stagelens-bundle/1", "source": "test"}\n'


def timeline(i: int, model: str = "model-0") -> dict:
    return {"request_id": f"r{i}", "model": model, "prompt_tokens": 10, "output_tokens": 5, "arrival": i * 0.02,
            "first_token": i * 0.02 + 0.01, "finished": i * 0.02 + 0.05,
            "chunks": [{"start": i * 0.02, "end": i * 0.02 + 0.01}]}


def write_timelines(path, count: int) -> None:
    line = json.dumps({"kind": "timeline", "timeline": timeline(0)}) + "\n"
    path.write_text(HEADER + line * count)


def test_a_bundle_larger_than_a_replay_reads_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.jsonl"
    with open(path, "w") as f:
        f.write(HEADER)
        f.truncate(MAX_BUNDLE_BYTES + 1)        # sparse: nothing written past the header
    line = assert_one_line_error(stagelens("whatif", "--replay", str(path)), str(path), "512 MiB",
                                 "record a shorter window")
    assert "line" not in line           # refused on its size, before its first line


def test_a_pipe_is_refused_once_it_gives_more_than_a_replay_reads(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    filler = (" " * (32 * 2**20 - 1) + "\n").encode()       # blank lines: the reader skips them

    def write():
        try:
            with open(fifo, "wb") as f:
                f.write(HEADER.encode())
                for _ in range(MAX_BUNDLE_BYTES // len(filler) + 2):
                    f.write(filler)
        except BrokenPipeError:
            pass        # the reader stopped: what the test wants

    writer = threading.Thread(target=write)
    writer.start()
    with pytest.raises(UserError, match=r"pipe.jsonl:17: the bundle goes on, past 512 MiB"):
        read_bundle(str(fifo))
    writer.join(timeout=30)


def test_request_timelines_past_the_limit_are_refused_at_the_line_that_passes_it(tmp_path):
    path = tmp_path / "many.jsonl"
    write_timelines(path, MAX_REPLAY_REQUESTS + 1)
    with pytest.raises(UserError, match=rf"many.jsonl:{MAX_REPLAY_REQUESTS + 2}: more than 100,000 request"):
        read_bundle(str(path))


def test_ten_minutes_at_fifty_requests_a_second_are_read(tmp_path):
    path = tmp_path / "ten-minutes.jsonl"
    write_timelines(path, 10 * 60 * 50)
    assert len(read_bundle(str(path)).timelines) == 30_000


def test_requests_naming_more_models_than_an_engine_serves_are_refused():
    window = {"timelines": [timeline(i, f"adapter-{i}") for i in range(MAX_REPLAY_MODELS + 1)]}
    with pytest.raises(UserError, match=r"http://agent: the requests name 65 models, more than the 64 an engine"):
        observed_from_window("http://agent", window, [])
    window["timelines"][-1]["model"] = "adapter-0"
    assert len(observed_from_window("http://agent", window, []).requests) == MAX_REPLAY_MODELS + 1


def test_a_window_claiming_more_output_than_a_replay_simulates_is_refused_before_it_runs():
    """A few requests whose outputs are 131,072 tokens each would run the simulation for many minutes."""
    count = MAX_REPLAY_OUTPUT_TOKENS // 131_072 + 1
    window = {"timelines": [{**timeline(i), "output_tokens": 131_072, "finished": i * 0.02 + 60} for i in range(count)]}
    with pytest.raises(UserError, match=r"http://agent: the requests hold 5,\d{3},\d{3} output tokens, past the"):
        observed_from_window("http://agent", window, [])
    window["timelines"].pop()
    assert len(observed_from_window("http://agent", window, []).requests) == count - 1


def test_a_replay_takes_as_many_models_as_the_bundled_engine_registers():
    from stagelens.engine_hooks.engine.config import MAX_MODELS

    assert MAX_REPLAY_MODELS == MAX_MODELS
