"""JSON another process sends is bounded in what its parse builds, not only in bytes (issue 39 item 3): `tui --connect`,
`whatif --connect` and `fleet` against loopback servers answering a few MB of `{},` (~24x that once parsed) are
refused unparsed, in one line naming the source; the refusal costs about the answer's bytes."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from stagelens.errors import CollectError
from stagelens.fleet.query import FleetQuery
from stagelens.http_client import get_json
from stagelens.json_answer import MAX_ITEMS, count_items, parse_answer
from stagelens.tui.remote_feed import FRAMES_MAX_ITEMS, RemoteFeed
from tests.helpers.cli_run import assert_one_line_error, stagelens
from tests.helpers.frame_builders import engine_snapshot, frame
from tests.helpers.hostile_servers import ScriptedServer, answer


def empty_objects(n: int) -> bytes:
    """A list of `n` empty objects: 3 bytes each, ~70 bytes each once parsed."""
    return b"[" + b"{}," * (n - 1) + b"{}]"


def serving(body: bytes) -> ScriptedServer:
    """A server answering every GET with `body` as JSON."""
    def script(server, conn):
        server.read_head(conn)
        answer(conn, body, headers={"Content-Type": "application/json"})
    return ScriptedServer(script)


def test_the_count_bounds_what_json_loads_builds():
    assert count_items(b'[{"a": [1, 2]}, {}]') == 6         # 2 lists, 2 objects, 2 commas: the 6 values
    assert count_items(b'"a,b,{["') == 4                    # inside a string they count too: the count errs high
    assert parse_answer(b'{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}


def test_an_answer_of_more_items_than_allowed_is_refused_unparsed_at_the_cost_of_its_bytes():
    body = empty_objects(MAX_ITEMS)                          # 3 MB: parsed, ~70 MB of objects
    with serving(body) as server:
        tracemalloc.start()
        try:
            with pytest.raises(CollectError) as refused:
                get_json(server.url, "/api/v1/whatif/window")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert str(refused.value) == (f"{server.url}/api/v1/whatif/window: the answer holds more than 1,000,000 JSON "
                                  "items (objects, lists and their elements): refused unparsed")
    assert peak < 4 * len(body)                              # the body read, never its objects


def test_a_legitimate_answer_of_that_many_bytes_is_read():
    body = json.dumps([frame(i, engine_snapshot()).to_dict() for i in range(60)]).encode()
    with serving(body) as server:
        assert len(get_json(server.url, "/api/v1/frames")) == 60


def test_json_nested_past_the_limit_is_refused_before_anyone_walks_it():
    with serving(b"[" * 500 + b"]" * 500) as server, pytest.raises(CollectError) as refused:
        get_json(server.url, "/api/v1/config")
    assert str(refused.value).endswith("/api/v1/config: the answer is JSON nested deeper than 64 levels")


def test_the_tui_remote_source_says_its_frames_were_refused_and_keeps_polling():
    with serving(empty_objects(FRAMES_MAX_ITEMS)) as server:
        poll = RemoteFeed(server.url, timeout=10).poll()
    assert not poll.frames and poll.error == (f"{server.url}/api/v1/frames?since=0: the answer holds more than "
                                              "4,000,000 JSON items (objects, lists and their elements): refused "
                                              "unparsed")


def test_whatif_connect_refuses_a_flood_of_items_in_one_line():
    with serving(empty_objects(MAX_ITEMS)) as server:
        proc = stagelens("whatif", "--connect", server.url)
    assert_one_line_error(proc, f"{server.url}/api/v1/whatif/window", "more than 1,000,000 JSON items")


def test_tui_connect_reads_the_server_s_settings_through_the_same_bound():
    from stagelens.tui.server_settings import server_settings

    with serving(empty_objects(MAX_ITEMS)) as server:
        settings, notice = server_settings(server.url)
    assert settings is None and "/api/v1/config: the answer holds more than 1,000,000 JSON items" in notice


def test_the_fleet_refuses_a_prometheus_answer_of_too_many_series_and_keeps_its_rows():
    tiny = b'{"metric":{},"value":[0,"1"]},'                # 5 items in 30 bytes, 200,001 series
    body = (b'{"status":"success","data":{"resultType":"vector","result":[' + tiny * 200_000
            + b'{"metric":{},"value":[0,"1"]}]}}')
    with serving(body) as server:
        view = FleetQuery(server.url).fetch()
    assert view.error == (f"prometheus {server.url}: HTTP 200: the answer holds more than 1,000,000 JSON items "
                          "(objects, lists and their elements): refused unparsed")
    assert view.rows == []
