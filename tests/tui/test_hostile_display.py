"""Terminal escapes sent by another process never reach the user's terminal (issue 24 item 5, issue 39 item 1):
agent.printable, and the screens that show what engines, Prometheus, a server and a bundle said, driven by Textual's
pilot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stagelens.bundle import read_bundle
from stagelens.cli import main
from stagelens.diagnosis import load_config
from stagelens.diagnosis.evaluate import diagnose
from stagelens.fleet.model import FleetView
from stagelens.fleet.query import build_rows
from stagelens.frame import Frame
from stagelens.printable import MAX_DEPTH, TooDeep, printable, printable_data
from stagelens.probes.topology import Topology
from stagelens.tui.app import StagelensApp
from stagelens.tui.feed import Feed, Poll
from stagelens.tui.fleet import FleetApp
from stagelens.tui.fleet.app import Fetched
from stagelens.tui.messages import Polled
from stagelens.tui.remote_feed import RemoteFeed
from stagelens.tui.replay_feed import ReplayFeed
from stagelens.tui.server_settings import server_settings
from tests.helpers.cli_run import assert_one_line_error, stagelens
from tests.helpers.frame_builders import engine_snapshot, frame, series
from tests.helpers.hostile_servers import ScriptedServer, answer
from tests.helpers.tui_support import text_of

ESCAPES = "\x1b]52;c;cHduZWQ=\x07\x1b]0;owned\x07\x1b[2J"     # OSC 52 (clipboard), OSC 0 (title), clear screen
NOW = 1_800_000_000.0


def test_printable_swaps_each_control_for_a_visible_one_and_keeps_the_length():
    shown = printable(f"llama{ESCAPES}\x9b2J\u202etxt.exe\u2028\x7f")
    assert shown == "llama␛]52;c;cHduZWQ=␇␛]0;owned␇␛[2J\ufffd2J\ufffdtxt.exe\ufffd\u2421"
    assert shown.isprintable() and len(shown) == len(f"llama{ESCAPES}\x9b2J\u202etxt.exe\u2028\x7f")
    assert printable("Llama-3.1 8B · ☃ ñ") == "Llama-3.1 8B · ☃ ñ" and printable(shown) == shown


class Shown(Feed):
    kind = "remote"

    def poll(self) -> Poll:
        return Poll()


@pytest.mark.asyncio
async def test_the_engine_s_model_name_with_escapes_is_shown_printable_in_the_node_tui():
    app = StagelensApp(Shown(), autopoll=False)
    async with app.run_test(size=(160, 48)) as pilot:
        app.post_message(Polled(Poll([frame(i, engine_snapshot(model=f"llama{ESCAPES}")) for i in range(3)])))
        await pilot.pause()
        screen = text_of(app)
    assert "\x1b]" not in screen and "\x07" not in screen
    assert "llama␛]52;c;cHduZWQ=" in screen and "␛]0;owned" in screen and "␛[2J" in screen   # Rich drops BEL


class OneAnswer:
    prometheus_url = "http://prometheus:9090"
    selector = '{job="stagelens"}'

    def fetch(self) -> FleetView:
        raise AssertionError("the test posts the answer")


@pytest.mark.asyncio
async def test_labels_with_escapes_are_shown_printable_on_the_fleet_screen():
    metric = {"job": "stagelens", "instance": f"evil{ESCAPES}:1", "cluster": f"eu{ESCAPES}"}
    answer = [{"metric": {"__name__": "up", **metric}, "value": [NOW, "1"]},
              {"metric": {"__name__": "stagelens_stage_state", "stage": "kv_cache", **metric}, "value": [NOW, "2"]}]
    app = FleetApp(OneAnswer(), autopoll=False)
    async with app.run_test(size=(160, 48)) as pilot:
        app.post_message(Fetched(FleetView(build_rows(answer), fetched_unix=NOW, prometheus=OneAnswer.prometheus_url)))
        await pilot.pause()
        await pilot.press("down")
        screen = text_of(app)
    assert "\x1b]" not in screen and "\x07" not in screen
    assert "evil␛]52;c;cHduZWQ=␇" in screen


def test_a_server_s_diagnosis_text_is_printed_printable_by_diagnose_connect(capsys):
    document = diagnose(series([{}] * 5)).to_dict()
    document["stages"][0]["explanation"] = f"all is well{ESCAPES}"

    def server(srv, conn):
        srv.read_head(conn)
        answer(conn, json.dumps(document), headers={"Content-Type": "application/json"})

    with ScriptedServer(server) as agent, pytest.raises(SystemExit):
        main(["diagnose", "--connect", agent.url])
    out = capsys.readouterr().out
    assert "all is well␛]52;c;cHduZWQ=␇" in out and "\x1b" not in out and "\x07" not in out


# --- issue 39 item 1: what a server or a bundle sends is printable wherever it is shown --------------------------
# OSC 0 ended by ST (ESC \: Rich keeps it whole, where it drops BEL), OSC 52, CSI, and the C1 controls CSI and OSC
HOSTILE = "\x1b]0;owned\x1b\\\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b2J\x9d0;title\x9c"
RAW = ("\x1b", "\x07", "\x9b", "\x9d", "\x9c")


def raw_controls(text: str) -> list[str]:
    return [c for c in RAW if c in text]


def test_printable_swaps_st_terminated_osc_and_c1_controls():
    assert printable(HOSTILE) == "␛]0;owned␛\\␛]52;c;cHduZWQ=␇␛[2J\ufffd2J\ufffd0;title\ufffd"


def test_printable_data_makes_every_string_printable_keys_too_and_copies_only_what_it_changes():
    clean = {"gpus": ["GPU0"], "n": [1, 2.5, None, True]}
    assert printable_data(clean) is clean
    data = {f"k{HOSTILE}": [{"name": f"A100{HOSTILE}", "n": 1}], "same": clean}
    shown = printable_data(data)
    assert shown == {f"k{printable(HOSTILE)}": [{"name": f"A100{printable(HOSTILE)}", "n": 1}], "same": clean}
    assert data[f"k{HOSTILE}"][0]["name"] == f"A100{HOSTILE}"        # the data it was given is left as it was
    deep: list = []
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(TooDeep):
        printable_data(deep)


def hostile_frame(t: float):
    f = frame(t, engine_snapshot(model=f"llama{HOSTILE}"), gpus=[
        {"index": 0, "name": f"A100{HOSTILE}", "utilization_gpu_ratio": 0.5, "pcie": None, "nvlinks": []}])
    f.node_sample.topology = Topology(gpus=[f"GPU0{HOSTILE}"], matrix=[["X"]], cpu_affinity=[f"0-7{HOSTILE}"],
                                      numa_affinity=[0], links=[])
    return f


def test_a_frame_read_back_holds_printable_text_only():
    read = Frame.from_dict(json.loads(json.dumps(hostile_frame(NOW).to_dict())))
    assert read.node_sample.topology.cpu_affinity == [f"0-7{printable(HOSTILE)}"]
    assert read.engine.engine.model == f"llama{printable(HOSTILE)}"


async def _main_and_topology_screens(app, pilot, poll) -> tuple[str, str]:
    app.post_message(Polled(poll))
    await pilot.pause()
    main_screen = text_of(app)
    await pilot.press("t")
    await pilot.pause()
    return main_screen, text_of(app)


@pytest.mark.asyncio
async def test_tui_connect_shows_a_lying_server_s_signal_names_and_topology_printable():
    config = json.dumps({"thresholds": {f"kv{HOSTILE}": {"warn": 1}}})
    frames = json.dumps([hostile_frame(NOW + i).to_dict() for i in range(3)])

    def server(srv, conn):
        path = srv.read_head(conn).split(b" ")[1]
        body = config if path.startswith(b"/api/v1/config") else frames if b"/frames" in path else "[]"
        answer(conn, body, headers={"Content-Type": "application/json"})

    with ScriptedServer(server) as agent:
        base, notice = server_settings(agent.url)         # what `tui --connect` does first
        feed = RemoteFeed(agent.url)
        app = StagelensApp(feed, config=load_config(None, (), base), notice=notice, autopoll=False)
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            main_screen, topology = await _main_and_topology_screens(app, pilot, feed.poll())
    assert "judging with this TUI's thresholds" in main_screen                   # the toast, wrapped
    assert "[thresholds.kv␛]0;owned␛\\␛]52;c;cHduZWQ=␇␛[2J" in main_screen
    assert "0-7␛]0;owned␛\\" in topology
    assert raw_controls(main_screen) == raw_controls(topology) == []


@pytest.mark.asyncio
async def test_tui_replay_shows_a_bundle_s_topology_printable(tmp_path):
    bundle = tmp_path / "hostile.jsonl"
    lines = (Path(__file__).parents[1] / "fixtures" / "bundles" / "hol-blocking.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:
        if record.get("kind") == "frame":
            record["frame"]["node_sample"]["topology"]["cpu_affinity"][0] = f"0-7{HOSTILE}"
    bundle.write_text("".join(json.dumps(r) + "\n" for r in records))
    feed = ReplayFeed(read_bundle(str(bundle)))
    app = StagelensApp(feed, autopoll=False)
    async with app.run_test(size=(160, 48)) as pilot:
        _, topology = await _main_and_topology_screens(app, pilot, feed.poll())
    assert "0-7␛]0;owned␛\\␛]52;c;cHduZWQ=␇" in topology and raw_controls(topology) == []


def test_topo_refuses_a_snapshot_whose_cpu_affinity_holds_escapes(tmp_path):
    snapshot = json.loads((Path(__file__).parents[1] / "fixtures" / "nvml" / "a100x4_nvlink.json").read_text())
    snapshot["devices"][1]["cpu_affinity"] = f"0-7{HOSTILE}"
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(snapshot))
    proc = stagelens("--nvml-snapshot", str(path), "topo")
    assert_one_line_error(proc, f"{path}: devices[1].cpu_affinity: expected printable text, found '\\x1b' at "
                                "character 3")
    assert raw_controls(proc.stdout + proc.stderr) == []
