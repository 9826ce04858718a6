"""Terminal escapes sent by another process never reach the user's terminal (issue 24 item 5): agent.printable,
and the screens that show what engines and Prometheus said, driven by Textual's pilot."""

from __future__ import annotations

import json

import pytest

from agent.cli import main
from agent.diagnosis.evaluate import diagnose
from agent.fleet.model import FleetView
from agent.fleet.query import build_rows
from agent.printable import printable
from agent.tui.app import StagelensApp
from agent.tui.feed import Feed, Poll
from agent.tui.fleet import FleetApp
from agent.tui.fleet.app import Fetched
from agent.tui.messages import Polled
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
