"""`whatif --set` and `--today` read each value through the lab's flag table
(agent/lab/flag_values.py): the same bad value is refused in the same words on `lab` and on
`whatif`. Each `--set` is one candidate; a refused one among several says so and shows the comma
form that makes them one (issue 40 item 4). Real CLI runs on a recorded bundle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli_run import assert_one_line_error, stagelens

BUNDLE = str(Path(__file__).parents[1] / "fixtures" / "bundles" / "healthy.jsonl")
# without chunked prefill, the recording's budget (512) cannot hold a prompt of max_model_len (2048)
NO_CHUNKING = "enable-chunked-prefill=false"
BUDGET = "max-num-batched-tokens=4096"


def _sets(*texts: str) -> list[str]:
    return [arg for text in texts for arg in ("--set", text)]


# one bad value of each kind the lab's flags read: a bounded whole number, a name among a few, a
# size. `lab` spells chunked prefill as a pair of switches: its true or false has no `lab` value to
# compare.
@pytest.mark.parametrize("option, flag, value", [
    ("--set", "max-num-seqs", "abc"), ("--set", "max-num-seqs", "0"),
    ("--set", "block-size", "1_0"), ("--set", "policy", "lifo"), ("--set", "allocator", "buddy"),
    ("--set", "kv-cache-memory", "12XB"), ("--today", "max-model-len", "1"),
], ids=["whole-number", "out-of-bounds", "underscore", "policy", "allocator", "size", "today"])
def test_a_bad_value_is_refused_in_the_words_of_the_labs_flag(option, flag, value):
    lab = assert_one_line_error(stagelens("lab", f"--{flag}", value), f"--{flag}: ")
    whatif = stagelens("whatif", "--replay", BUNDLE, option, f"{flag}={value}")
    line = assert_one_line_error(whatif)
    # the same line, but for where the flag was typed
    assert line == lab.replace(f"--{flag}: ", f"{option} {flag}: ", 1)


def test_two_sets_are_two_candidates_and_a_refused_one_shows_the_comma_form():
    proc = stagelens("whatif", "--replay", BUNDLE, *_sets(NO_CHUNKING, BUDGET))
    assert_one_line_error(proc, f"--set {NO_CHUNKING}: --max-num-batched-tokens: ",
                          f"each --set is one candidate (--set {NO_CHUNKING} --set {BUDGET}: "
                          "2 candidates)",
                          f"changing them together: --set {NO_CHUNKING},{BUDGET}")


def test_the_comma_form_is_one_candidate_changing_both():
    proc = stagelens("whatif", "--replay", BUNDLE, "--json", *_sets(f"{NO_CHUNKING},{BUDGET}"))
    assert proc.returncode == 0, proc.stderr
    candidates = json.loads(proc.stdout)["candidates"]
    both = {"enable-chunked-prefill": False, "max-num-batched-tokens": 4096}
    assert [c["set"] for c in candidates] == [both]


@pytest.mark.parametrize("texts", [[NO_CHUNKING], [NO_CHUNKING, "enable-chunked-prefill=true"]],
                         ids=["one-set", "one-flag-compared"])
def test_a_refused_set_with_nothing_to_join_shows_no_comma_form(texts):
    proc = stagelens("whatif", "--replay", BUNDLE, *_sets(*texts))
    line = assert_one_line_error(proc, f"--set {NO_CHUNKING}: --max-num-batched-tokens: ")
    assert "candidate" not in line
