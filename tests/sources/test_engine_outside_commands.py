"""`--engine vllm|sglang --engine-url` on tui and record, and the flags that come with it (--otlp-receiver,
--otlp-forward, --kv-events): an engine served for real on loopback from the exposition fixtures."""

from __future__ import annotations

import pytest

from stagelens.bundle import read_bundle
from stagelens.cli import main
from stagelens.commands.flags import OutsideFlags, open_engine_source
from stagelens.errors import UserError
from stagelens.tui.outside_feed import OutsideFeed
from tests.helpers.engine_stub import DGX, Engine, closed_port_url, fixture


@pytest.fixture
def engine():
    served = Engine(fixture("vllm_v1_new_names.txt"))
    yield served
    served.close()


@pytest.mark.parametrize("argv, message", [
    (["tui", "--engine", "vllm", "--engine-url", "http://x:1", "--scenario", "hol-blocking"], "--scenario"),
    (["tui", "--connect", "http://x", "--engine", "vllm"], "an engine is read live, not with --replay or --connect"),
    (["tui", "--engine-url", "http://x:1"], "--engine-url needs --engine vllm or sglang"),
    (["record", "--out", "x.jsonl", "--engine", "vllm", "--engine-url", "http://x:1", "--max-num-seqs", "8"],
     "--max-num-seqs: lab engine flags"),
    (["serve", "--otlp-forward", "http://c:4318/v1/traces"], "--otlp-forward needs --otlp-receiver"),
    (["serve", "--engine", "vllm", "--engine-url", "http://x:1", "--otlp-forward", "http://c/v1/traces"],
     "--otlp-forward needs --otlp-receiver"),
    (["serve", "--engine", "sglang", "--engine-url", "http://x:1", "--kv-events", "tcp://x:5557"],
     "--kv-events needs --engine vllm"),
    (["diagnose", "--engine", "vllm", "--engine-url", "http://x:1", "--kv-events", "x:5557"],
     "expected tcp://HOST:PORT or ipc://PATH"),
    (["diagnose", "--engine", "vllm", "--engine-url", "http://x:1", "--otlp-receiver", "4318"],
     "--otlp-receiver: expected HOST:PORT"),
    (["diagnose", "--engine", "vllm", "--engine-url", "http://x:1", "--otlp-receiver", "a:1",
      "--otlp-receiver-grpc", "b:2"], "one host for both"),
])
def test_bad_outside_flags_are_one_line_and_exit_3(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--nvml-snapshot", DGX, *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 3 and message in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_receiver_port_already_taken_is_a_usage_error_not_a_traceback(engine):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        source = open_engine_source("vllm", OutsideFlags(engine.url, otlp_receiver=f"127.0.0.1:{port}"))
        with pytest.raises(UserError, match="cannot listen for the engine's traces"):
            source.start()


def test_record_reads_an_engine_from_outside_into_a_bundle_that_replays(engine, tmp_path, capsys):
    out = tmp_path / "vllm.jsonl"
    with pytest.raises(SystemExit) as exit_:
        main(["--nvml-snapshot", DGX, "record", "--out", str(out), "--engine", "vllm", "--engine-url", engine.url,
              "--duration", "1.5", "--interval", "0.5"])
    assert exit_.value.code == 0, capsys.readouterr().err
    bundle = read_bundle(str(out))
    assert len(bundle.frames) >= 2 and all(f.engine is not None for f in bundle.frames)
    assert bundle.frames[-1].engine.engine.source == "vllm" and bundle.frames[-1].engine.usage.num_blocks == 2000
    assert "frames" in capsys.readouterr().out


def test_record_from_an_engine_that_never_answers_exits_3_and_keeps_the_node(tmp_path, capsys):
    out = tmp_path / "dead.jsonl"
    with pytest.raises(SystemExit) as exit_:
        main(["--nvml-snapshot", DGX, "record", "--out", str(out), "--engine", "vllm", "--engine-url",
              closed_port_url(), "--duration", "1", "--interval", "0.5"])
    err = capsys.readouterr().err
    assert exit_.value.code == 3 and "never answered" in err and "Traceback" not in err
    assert read_bundle(str(out)).frames       # the node's frames are kept


def test_the_tui_source_for_an_engine_read_from_outside_polls_it_and_goes_stale_when_it_stops(engine):
    source = OutsideFeed(open_engine_source("vllm", OutsideFlags(engine.url)), DGX, interval=0.5)
    assert not source.can_fix and source.label == f"vllm at {engine.url}"
    source.open()
    try:
        first = source.poll()
        assert first.error is None and first.frames[0].engine.engine.source == "vllm"
        engine.close()
        down = source.poll()
        assert down.frames and down.frames[0].engine is None
        assert down.error.startswith(f"vllm at {engine.url}:") and "\n" not in down.error
    finally:
        source.close()
