"""The TUI's sources and pure pieces, without a screen: replay, remote (a stub server), the waterfall,
the state's event log, and the command's flag checks."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from stagelens.bundle import read_bundle
from stagelens.cli import main
from stagelens.diagnosis import load_config
from stagelens.diagnosis.config import Threshold
from stagelens.engine_hooks.records.timeline import PrefillChunk, RequestTimeline, Wait
from stagelens.probes.gpu import GpuSample
from stagelens.probes.links import PcieSample
from stagelens.tui.drawing.waterfall import bar_cells, phase_at
from stagelens.tui.remote_feed import RemoteFeed
from stagelens.tui.replay_feed import ReplayFeed
from stagelens.tui.server_settings import server_settings
from stagelens.tui.state import TuiState
from stagelens.tui.widgets.gpu_panel import gpu_table
from tests.helpers.frame_builders import engine_snapshot, frame

BUNDLE = Path(__file__).parents[1] / "fixtures" / "bundles" / "hol-blocking.jsonl"


def test_replay_starts_at_the_end_paused_then_plays_one_frame_a_poll_with_its_timelines():
    bundle = read_bundle(str(BUNDLE))
    source = ReplayFeed(bundle)
    first = source.poll()
    assert first.reset and len(first.frames) == len(bundle.frames) and first.position == (20, 20)
    assert len(first.timelines) == len(bundle.timelines)
    assert source.poll().frames == []                      # paused at the end
    source.seek_to(5)
    again = source.poll()
    assert again.reset and len(again.frames) == 5
    assert all(t.finished <= again.frames[-1].time_monotonic for t in again.timelines)
    source.set_paused(False)
    step = source.poll()
    assert [f.time_unix for f in step.frames] == [bundle.frames[5].time_unix] and step.position == (6, 20)


class _Stub(BaseHTTPRequestHandler):
    frames: list = []
    asked: list = []
    config: dict = {}

    def do_GET(self):  # noqa: N802 - the http.server API
        self.asked.append(self.path)
        if self.path == "/api/v1/config":
            body = self.config
        elif self.path.startswith("/api/v1/frames"):
            since = float(self.path.split("since=")[1])
            body = [f.to_dict() for f in self.frames if f.time_unix > since]
        else:
            body = [RequestTimeline("req-1", "m", 8, arrival=1.0, finished=2.0).to_dict(), {"request_id": "torn"}]
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub_server():
    _Stub.frames = [frame(i, engine_snapshot()) for i in range(3)]
    _Stub.asked = []
    server = HTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_remote_source_asks_for_frames_since_the_last_it_got(stub_server):
    source = RemoteFeed(stub_server + "/")
    first = source.poll()
    assert first.error is None and first.reset and len(first.frames) == 3
    assert [t.request_id for t in first.timelines] == ["req-1"]        # one that does not read is left out
    assert first.timelines[0].latency_s == 1.0
    assert source.poll().frames == []
    assert _Stub.asked[-2] == f"/api/v1/frames?since={_Stub.frames[-1].time_unix!r}"
    source.set_paused(True)
    assert source.poll().frames == [] and len(_Stub.asked) == 4


def test_tui_connect_judges_with_the_servers_thresholds_and_says_when_it_cannot(stub_server):
    _Stub.config = load_config(overrides=["kv_fragmentation_ratio=0.05:0.1"]).to_dict()
    base, notice = server_settings(stub_server)
    assert notice is None
    config = load_config(None, ["scheduler_wait_p99=0.5:1"], base)            # the user's flags still win
    assert config.threshold("kv_fragmentation_ratio") == Threshold(0.05, 0.1)
    assert config.threshold("scheduler_wait_p99") == Threshold(0.5, 1.0)
    _Stub.config = {"thresholds": {"no_such_signal": {"warn": 1}}}
    base, notice = server_settings(stub_server)
    assert base is None and "no_such_signal" in notice and "this TUI's thresholds" in notice
    base, notice = server_settings("http://127.0.0.1:9")
    assert base is None and "could not collect" in notice


def test_a_remote_source_that_does_not_answer_reports_an_error_instead_of_raising():
    poll = RemoteFeed("http://127.0.0.1:9", timeout=0.5).poll()
    assert poll.frames == [] and "could not collect" in poll.error


def test_waterfall_phases():
    t = RequestTimeline("r", "m", 100, arrival=0.0, finished=10.0, first_token=3.0,
                        waits=[Wait(0.0, 2.0, "behind_long_prefill"), Wait(6.0, 7.0, "preempted")],
                        chunks=[PrefillChunk(2.0, 3.0, 100, 0)])
    assert [phase_at(x, t) for x in (1.0, 2.5, 4.0, 6.5, 9.0)] == ["queue", "prefill", "decode", "preempted",
                                                                   "decode"]
    cells = bar_cells(t, 10, 10.0)
    assert cells[:2] == ["queue", "queue"] and cells[2] == "prefill" and "preempted" in cells
    assert len(bar_cells(t, 10, 20.0)) == 5                 # half the longest latency: half the width


def test_the_event_log_records_transitions_with_the_signals_behind_them():
    hol = {"decided_wait_p99_s": 0.9, "waiting_share": 0.5}
    frames = [frame(i, engine_snapshot()) for i in range(3)] + [frame(3 + i, engine_snapshot(scheduler=hol))
                                                                for i in range(3)]
    state = TuiState()
    state.add(frames)
    entries = [(e.stage, e.old, e.new) for e in state.log]
    # warn at the first firing sample, firing once the second confirms it
    assert ("scheduler", "ok", "warn") in entries and ("scheduler", "warn", "firing") in entries
    assert "scheduler wait p99 900 ms" in state.log[-1].text
    assert not any(e.old == "unknown" and e.new == "ok" for e in state.log)   # start-up is not news


@pytest.mark.parametrize("argv, message", [
    (["tui", "--connect", "http://x", "--replay", "b.jsonl"], "alternatives"),
    (["tui", "--replay", str(BUNDLE), "--scenario", "hol-blocking"], "local lab engine"),
    (["tui", "--connect", "http://x", "--max-num-seqs", "8"], "--max-num-seqs"),
    (["tui", "--interval", "0"], "--interval"),
    (["tui", "--replay", "/nonexistent.jsonl"], "cannot read the bundle"),
])
def test_bad_flags_fail_before_the_screen_opens(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 3
    assert message in capsys.readouterr().err


def test_pcie_bars_are_coloured_by_the_thresholds_the_diagnosis_judges_with():
    gpu = GpuSample(index=0, pcie=PcieSample(tx_util_ratio=0.6, rx_util_ratio=0.1))

    def bar_colours(overrides=()):
        threshold = load_config(overrides=list(overrides)).threshold("pcie_backpressure")
        bar = gpu_table([gpu], None, False, threshold).rows[0][4].to_text(12)
        return {str(s.style) for s in bar.spans if "█" in bar.plain[s.start:s.end]}

    assert bar_colours() == {"red"}                                     # 0.6 is past the default firing 0.50
    assert bar_colours(["pcie_backpressure=0.7:0.9"]) == {"green"}      # an override moves the bar's colour too
