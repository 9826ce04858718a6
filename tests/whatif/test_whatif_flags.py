"""`stagelens whatif` flags read strictly and its results never lost to a plot (issue 39 items 13 and 20): a flag or
an SLO figure given twice is refused, not the last kept; a number is ASCII digits (int() and float() also read
`٣` and `1_0`); `--plot` is checked before the search and written after the results are printed. Real CLI runs on
a recorded bundle."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stagelens.numbers import number_of_text
from tests.helpers.cli_run import assert_one_line_error, stagelens

BUNDLE = str(Path(__file__).parents[1] / "fixtures" / "bundles" / "healthy.jsonl")


@pytest.mark.parametrize("text, integer, number", [
    ("16", True, 16), (" -2 ", True, -2), ("0.5", False, 0.5), ("1e-3", False, 0.001), (".5", False, 0.5),
    ("٣", True, None), ("1_0", True, None), ("١٫٥", False, None), ("1_0.5", False, None), ("0x10", True, None),
    ("1.5", True, None), ("", False, None), ("9" * 5000, True, None),
])
def test_a_number_is_ascii_digits_only(text, integer, number):
    assert number_of_text(text, integer) == number


@pytest.mark.parametrize("args, words", [
    (["--set", "max-num-seqs=16,max-num-seqs=2"],
     ["--set max-num-seqs: given twice (max-num-seqs=16 and max-num-seqs=2): give each flag once"]),
    (["--today", "max-num-seqs=2", "--today", "max_num_seqs=4"], ["--today max_num_seqs: given twice"]),
    (["--set", "max-num-seqs=٣"], ["--set max-num-seqs: must be a whole number", "got '٣'"]),
    (["--set", "max-num-seqs=1_0"], ["--set max-num-seqs: must be a whole number", "got '1_0'"]),
    (["--today", "max-num-seqs=٣"], ["--today max-num-seqs: must be a whole number", "got '٣'"]),
    (["--search", "--slo", "ttft_p99=1,ttft_p99=2"], ["--slo ttft_p99: given twice"]),
    (["--search", "--slo", "ttft_p99=1", "--slo", "ttft_p99=2"], ["--slo ttft_p99: given twice"]),
    (["--search", "--slo", "ttft_p99=١"], ["--slo ttft_p99: '١' is not a positive number of seconds"]),
    (["--search", "--slo", "ttft_p99=1_0"], ["--slo ttft_p99: '1_0' is not a positive number of seconds"]),
    (["--scale-rate", "٢"], ["--scale-rate: must be a number"]),
], ids=["set-twice", "today-twice", "set-arabic-digit", "set-underscore", "today-arabic-digit", "slo-twice",
        "slo-flag-twice", "slo-arabic-digit", "slo-underscore", "number-flag-arabic-digit"])
def test_a_repeated_or_non_ascii_value_is_one_line_and_exit_3(args, words):
    assert_one_line_error(stagelens("whatif", "--replay", BUNDLE, *args), *words)


def test_slo_figures_may_come_in_several_flags():
    proc = stagelens("whatif", "--replay", BUNDLE, "--json", "--search", "--slo", "ttft_p99=10", "--slo", "tpot_p99=1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["search"]["slo"] == {"ttft_p99": 10.0, "tpot_p99": 1.0}


def test_a_plot_format_matplotlib_cannot_write_is_refused_before_the_search(tmp_path):
    proc = stagelens("whatif", "--replay", BUNDLE, "--search", "--plot", str(tmp_path / "front.txt"))
    assert_one_line_error(proc, "--plot", "front.txt: cannot draw a .txt image (use one of", "png", "svg")
    assert proc.stdout == ""


@pytest.mark.parametrize("as_json", [True, False])
def test_a_plot_that_cannot_be_written_comes_after_the_results_in_one_line(tmp_path, as_json):
    path = tmp_path / "no-such-folder" / "front.png"
    proc = stagelens("whatif", "--replay", BUNDLE, "--search", "--plot", str(path), *(["--json"] if as_json else []))
    assert_one_line_error(proc, f"--plot {path}: the plot was not written (No such file or directory); the results "
                                "were printed")
    if as_json:
        assert json.loads(proc.stdout)["search"]["evaluated"] > 0
    else:
        assert "today measured" in proc.stdout and "search" in proc.stdout


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full to stand for a full disk")
def test_a_full_disk_is_said_and_the_results_kept():
    proc = stagelens("whatif", "--replay", BUNDLE, "--json", "--search", "--plot", "/dev/full")
    assert_one_line_error(proc, "--plot /dev/full: the plot was not written (No space left on device)")
    assert json.loads(proc.stdout)["search"]["evaluated"] > 0
    assert not os.path.exists("/dev/full.png")         # written where it was named, not beside it


def test_the_plot_is_written_where_it_is_named(tmp_path):
    path = tmp_path / "front"                        # no suffix: a PNG, at this very path
    proc = stagelens("whatif", "--replay", BUNDLE, "--search", "--plot", str(path))
    assert proc.returncode == 0, proc.stderr
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

