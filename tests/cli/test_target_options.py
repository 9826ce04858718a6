"""`--replay FILE | --connect URL | live`, one option pair for diagnose, whatif and tui, checked in one place
(agent/commands/target.py): the same line for the same mistake, whichever command it is made on."""

import pytest

from tests.helpers.cli_run import assert_one_line_error, stagelens

BUNDLE = "tests/fixtures/bundles/hol-blocking.jsonl"


@pytest.mark.parametrize("command", ["diagnose", "whatif", "tui"])
def test_a_recording_and_a_server_at_once_is_the_same_line_on_every_command(command):
    line = assert_one_line_error(stagelens(command, "--replay", BUNDLE, "--connect", "http://127.0.0.1:1"),
                                 "--replay FILE and --connect URL are alternatives")
    assert line == "stagelens: error: --replay FILE and --connect URL are alternatives: give one"


def test_whatif_has_no_live_mode_and_says_so():
    assert_one_line_error(stagelens("whatif"), "give --replay FILE or --connect URL", "no live mode")


@pytest.mark.parametrize("command", ["diagnose", "tui"])
def test_an_engine_read_live_is_refused_beside_a_recording_in_the_same_words(command):
    assert_one_line_error(stagelens(command, "--replay", BUNDLE, "--engine", "vllm"),
                          "--engine: an engine is read live, not with --replay or --connect")


def test_lab_flags_beside_a_recording_are_named():
    assert_one_line_error(stagelens("tui", "--replay", BUNDLE, "--max-num-seqs", "4", "--scenario", "healthy"),
                          "--max-num-seqs, --scenario: engine and scenario flags apply to the local lab engine, "
                          "not with --replay or --connect")
