"""`stagelens fleet` against a Prometheus that answers odd or hostile values (issue 24 items 5, 11, 15): one node's
bad series touch that node's row only, the JSON stays JSON, no terminal escape reaches the terminal, and the
Prometheus URL's password is never shown. The Prometheus is a scripted loopback server answering its query API."""

from __future__ import annotations

import json

import pytest

from tests.helpers.fleet_cli import fleet
from tests.helpers.hostile_servers import ScriptedServer, answer

NOW = 1_700_000_000.0
ESCAPES = "\x1b]52;c;cHduZWQ=\x07\x1b]0;owned\x07\x1b[2J"     # OSC 52 (clipboard), OSC 0 (title), clear screen


def sample(name: str, value, instance: str, **labels) -> dict:
    return {"metric": {"__name__": name, "job": "stagelens", "instance": instance, **labels},
            "value": [NOW, str(value)]}


def healthy(instance: str, **target) -> list[dict]:
    out = [sample("up", 1, instance, **target), sample("stagelens_diagnosis_verdict_state", 0, instance, **target),
           sample("stagelens_frame_timestamp_seconds", NOW - 1, instance, **target)]
    for stage in ("kv_cache", "scheduler", "cold_path"):
        out += [sample("stagelens_stage_state", 0, instance, stage=stage, **target),
                sample("stagelens_stage_state_since_timestamp_seconds", NOW - 60, instance, stage=stage, **target)]
    return out


def prometheus(result: list | None = None, error: dict | None = None) -> ScriptedServer:
    document = error or {"status": "success", "data": {"resultType": "vector", "result": result or []}}

    def script(server, conn):
        server.read_head(conn)
        answer(conn, json.dumps(document), status="400 Bad Request" if error else "200 OK",
               headers={"Content-Type": "application/json"})
    return ScriptedServer(script)


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


# --- 11: one node's odd values stay in its row ---------------------------------------------------------------
@pytest.mark.parametrize("since", ["1e300", "-1e300"])
def test_an_absurd_since_time_reads_unknown_in_its_row_and_the_fleet_is_still_shown(since, capsys):
    times = ("stagelens_stage_state_since_timestamp_seconds", "stagelens_frame_timestamp_seconds")
    odd = [s for s in healthy("odd:1") if s["metric"]["__name__"] not in times]
    odd += [sample("stagelens_stage_state_since_timestamp_seconds", since, "odd:1", stage="kv_cache"),
            sample("stagelens_frame_timestamp_seconds", "-1.7976931348623157e308", "odd:1")]
    with prometheus([*healthy("good:1"), *odd]) as server:
        code, out, err = fleet(capsys, "--prometheus", server.url, "--json")
        text_code, text, _ = fleet(capsys, "--prometheus", server.url, "--once")
    assert code == text_code == 0 and err == "", err
    nodes = {n["instance"]: n for n in json.loads(out, parse_constant=_no_constants)["nodes"]}
    assert nodes["odd:1"]["stages"]["kv_cache"] == {"state": "ok", "since": None}
    assert nodes["odd:1"]["frame_age_s"] is None
    assert nodes["good:1"]["stages"]["kv_cache"]["since"] == "2023-11-14T22:12:20+00:00"
    assert "good:1" in text and "odd:1" in text


def test_a_garbage_verdict_cannot_hide_a_firing_stage(capsys):
    liar = [sample("up", 1, "liar:1"), sample("stagelens_diagnosis_verdict_state", "7", "liar:1"),
            sample("stagelens_stage_state", 2, "liar:1", stage="scheduler")]
    with prometheus([*healthy("good:1"), *liar]) as server:
        code, out, _ = fleet(capsys, "--prometheus", server.url, "--json")
    assert code == 2
    nodes = {n["instance"]: n for n in json.loads(out)["nodes"]}
    assert nodes["liar:1"]["verdict"] == "firing" and nodes["good:1"]["verdict"] == "ok"


# --- 5: labels and Prometheus's error are made printable ------------------------------------------------------
def test_label_values_with_terminal_escapes_are_shown_printable(capsys):
    with prometheus(healthy(f"evil{ESCAPES}:1", cluster=f"eu{ESCAPES}")) as server:
        code, out, _ = fleet(capsys, "--prometheus", server.url, "--once")
        _, document, _ = fleet(capsys, "--prometheus", server.url, "--json")
    assert code == 0
    for shown in (out, document):
        assert "\x1b" not in shown and "\x07" not in shown
    assert "evil␛]52;c;cHduZWQ=␇" in out and "cluster=eu␛]52" in out


def test_prometheus_s_error_field_reaches_stderr_printable(capsys):
    error = {"status": "error", "errorType": "bad_data", "error": f"parse error{ESCAPES}\nsecond line"}
    with prometheus(error=error) as server:
        code, out, err = fleet(capsys, "--prometheus", server.url, "--once")
    assert code == 3 and out == ""
    assert "\x1b" not in err and "\x07" not in err and len(err.strip().splitlines()) == 1
    assert "bad_data: parse error␛]52" in err


# --- 15: the Prometheus URL's credentials are used, never shown -----------------------------------------------
def test_the_prometheus_url_password_is_sent_but_never_echoed(capsys):
    with prometheus(healthy("good:1")) as server:
        url = server.url.replace("http://", "http://ops:hunter2@")
        code, out, err = fleet(capsys, "--prometheus", url, "--json")
        assert b"Authorization: Basic b3BzOmh1bnRlcjI=" in server.heads[0]
    assert code == 0 and "hunter2" not in out + err
    assert json.loads(out)["prometheus"] == server.url.replace("http://", "http://***@")
    code, out, err = fleet(capsys, "--prometheus", url, "--json", "--timeout", "1")   # the server is gone now
    assert code == 3 and "hunter2" not in out + err and "***@" in err
