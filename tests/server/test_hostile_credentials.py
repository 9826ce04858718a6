"""Credentials stay off the command line and out of what is shown (issue 24 item 15): serve's bearer token from
STAGELENS_TOKEN or --token-file, a warning when it is typed as --token, and URLs' passwords redacted."""

from __future__ import annotations

import pytest

from stagelens.cli import main
from tests.helpers.serve_support import ServeProcess


def run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def test_serve_reads_its_token_from_a_file_and_the_endpoints_that_change_state_take_it(tmp_path):
    secret = tmp_path / "token"
    secret.write_text("s3cret-from-a-file\n")
    server = ServeProcess(tmp_path, "--token-file", str(secret)).wait_ready()
    try:
        status, _ = server.request("POST", "/api/v1/scenario", {"name": None})
        assert status == 401
        status, body = server.request("POST", "/api/v1/scenario", {"name": None},
                                      headers={"Authorization": "Bearer s3cret-from-a-file"})
        assert status == 409, body          # past the token: no lab engine is hosted
    finally:
        server.stop()
    assert "s3cret" not in server.log_tail()


@pytest.mark.parametrize("content, said", [(None, "cannot read it"), ("\n  \n", "empty: no token in it"),
                                           ("x" * 5000, "larger than 4096 bytes")], ids=["missing", "blank", "huge"])
def test_a_token_file_that_holds_no_token_is_one_line_exit_3(content, said, tmp_path, capsys):
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "serve", "--token-file", str(path), "--listen", "127.0.0.1:1")
    assert code == 3 and out == "" and said in err and len(err.strip().splitlines()) == 1, err


def test_a_token_typed_on_the_command_line_warns_that_ps_shows_it(tmp_path, capsys, monkeypatch):
    code, _, err = run(capsys, "serve", "--token", "typed", "--listen", "nowhere")   # stops at the bad --listen
    assert code == 3 and "--token on the command line is readable by every user" in err, err
    monkeypatch.setenv("STAGELENS_TOKEN", "from-env")
    code, _, err = run(capsys, "serve", "--listen", "nowhere")
    assert code == 3 and "warning" not in err, err
    (tmp_path / "token").write_text("t")
    code, _, err = run(capsys, "serve", "--token-file", str(tmp_path / "token"), "--listen", "nowhere")
    assert code == 3 and "give one of them" in err, err


def test_serve_help_says_how_to_keep_the_token_off_the_command_line(capsys):
    code, out, _ = run(capsys, "serve", "--help")
    assert code == 0 and "STAGELENS_TOKEN" in out and "--token-file" in out and "ps" in out


def test_a_refused_engine_url_is_echoed_without_its_password(capsys):
    code, _, err = run(capsys, "diagnose", "--engine", "vllm", "--engine-url", "ftp://ops:hunter2@host")
    assert code == 3 and "hunter2" not in err and "ftp://***@host" in err, err


def test_the_token_is_asked_before_a_body_is_parsed(tmp_path):
    """Issue 39 item 19: FastAPI parses a body before it solves a route's dependencies, so a POST without the token
    but with a body that is not JSON got 422 and the parser's words; the token comes first."""
    secret = tmp_path / "token"
    secret.write_text("s3cret\n")
    server = ServeProcess(tmp_path, "--token-file", str(secret)).wait_ready()
    untokened = ServeProcess(tmp_path, name="serve-untokened").wait_ready()
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic czNjcmV0"}):
            for path in ("/api/v1/scenario", "/api/v1/bandwidth-probe"):
                status, body = server.request("POST", path, b"{not json", headers=headers)
                assert (status, body) == (401, {"detail": "a valid 'Authorization: Bearer <token>' header is "
                                                          "required"}), (path, headers)
        status, body = untokened.request("POST", "/api/v1/scenario", b"{not json")
        assert status == 403 and "disabled" in body["detail"]
        status, body = server.request("POST", "/api/v1/scenario", b"{not json",
                                      headers={"Authorization": "Bearer s3cret"})
        assert status == 422 and body["detail"][0]["type"] == "json_invalid"    # past the token: the body's fault
    finally:
        server.stop()
        untokened.stop()
