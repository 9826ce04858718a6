"""`bench compare`: exit 1 on a P99 regression beyond the tolerance, 0 without one, 2 on a malformed file."""

import json

import pytest

from stagelens.cli import main
from stagelens.loadtest.point import Point
from stagelens.loadtest.results import Results


def _write(path, p99s, variable="max_num_seqs", values=(1, 2, 4)):
    points = [Point(v, throughput_tokens_per_s=100.0 * v, latency_p99_s=p, ttft_p99_s=p / 4, requests=20)
              for v, p in zip(values, p99s, strict=True)]
    Results("sweep", variable, "bundled engine (in process)", {}, {"metric": "latency"}, points).write(path)
    return str(path)


def _run(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "compare", *args])
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def test_a_p99_regression_beyond_the_tolerance_exits_1_and_names_the_point(tmp_path, capsys):
    base = _write(tmp_path / "base.json", [0.30, 0.35, 0.50])
    worse = _write(tmp_path / "worse.json", [0.31, 0.36, 0.70])
    code, out, _ = _run(capsys, base, worse)
    assert code == 1
    assert "REGRESSED" in out and "max-num-seqs=4" in out and "+40%" in out
    assert _run(capsys, base, worse, "--tolerance", "0.5")[0] == 0


def test_no_regression_exits_0(tmp_path, capsys):
    base = _write(tmp_path / "base.json", [0.30, 0.35, 0.50])
    same = _write(tmp_path / "same.json", [0.32, 0.34, 0.52])     # within 10%
    code, out, _ = _run(capsys, base, same)
    assert code == 0 and "no regression" in out
    better = _write(tmp_path / "better.json", [0.20, 0.20, 0.20])
    assert _run(capsys, base, better)[0] == 0


def test_points_missing_on_one_side_are_listed_not_judged(tmp_path, capsys):
    base = _write(tmp_path / "base.json", [0.30, 0.35, 0.50])
    fewer = _write(tmp_path / "fewer.json", [0.30, 0.35], values=(1, 2))
    code, out, _ = _run(capsys, base, fewer)
    assert code == 0 and "not in the current run" in out


@pytest.mark.parametrize("content, words", [
    ("{not json", "not JSON"),
    (json.dumps({"format": "something-else", "points": []}), "not a stagelens bench result"),
    (json.dumps({"format": "stagelens-bench/1", "points": []}), "no points"),
    (json.dumps({"format": "stagelens-bench/1", "points": [{"throughput_tokens_per_s": 1}]}), "malformed point"),
    (json.dumps({"format": "stagelens-bench/1", "points": [{"value": 1, "latency_p99_s": "slow"}]}),
     "malformed point"),
])
def test_a_malformed_file_exits_3_naming_it(tmp_path, capsys, content, words):
    base = _write(tmp_path / "base.json", [0.30, 0.35, 0.50])
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, _, err = _run(capsys, base, str(bad))
    assert code == 3 and str(bad) in err and words in err and "Traceback" not in err
    code, _, err = _run(capsys, str(tmp_path / "missing.json"), base)
    assert code == 3 and "missing.json" in err


def test_runs_of_different_variables_do_not_compare(tmp_path, capsys):
    base = _write(tmp_path / "base.json", [0.30, 0.35, 0.50])
    other = _write(tmp_path / "other.json", [0.30, 0.35, 0.50], variable="block_size", values=(16, 32, 64))
    code, _, err = _run(capsys, base, other)
    assert code == 3 and "--block-size" in err
