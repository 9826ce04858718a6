"""A short sweep on the tiny engine writes results.json, curve.png and report.md; bad sweeps fail with one line."""

import json

import pytest

from stagelens.cli import main
from tests.helpers.serve_api import DGX

TINY = ["--model", "tiny", "--max-model-len", "256", "--kv-cache-memory", "2MiB", "--device", "cpu"]


def _run(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(["--nvml-snapshot", DGX, "bench", *args])
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def test_a_short_sweep_on_the_tiny_engine_writes_the_three_outputs(tmp_path, capsys, model_dir):
    out_dir = tmp_path / "out"
    code, out, err = _run(capsys, "sweep", *TINY, "--model-dir", model_dir, "--max-num-seqs", "1,4",
                          "--concurrency", "4", "--prompt-len", "uniform:16:48", "--output-len", "uniform:8:24",
                          "--duration", "2", "--out", str(out_dir))
    assert code == 0, err
    results = json.loads((out_dir / "results.json").read_text())
    assert results["format"] == "stagelens-bench/1" and results["mode"] == "sweep"
    assert results["variable"] == "max_num_seqs" and results["config"]["max_num_seqs"] == [1, 4]
    assert [p["value"] for p in results["points"]] == [1, 4]
    for p in results["points"]:
        assert p["requests"] > 0 and p["throughput_tokens_per_s"] > 0
        assert 0 < p["latency_p50_s"] <= p["latency_p99_s"] and p["ttft_p99_s"] is not None
        assert p["verdict"] in ("ok", "warn", "firing") and p["stage"] in ("none", "kv_cache", "scheduler",
                                                                             "cold_path")
        assert 0 < p["engine_busy_ratio"] <= 1
    knee = results["knee"]
    assert knee is None or (knee["past_index"] in (0, 1) and knee["reason"] and "past_stage" in knee)
    png = (out_dir / "curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    report = (out_dir / "report.md").read_text()
    rows = [line for line in report.splitlines() if line.startswith("| 1") or line.startswith("| 4")]
    assert len(rows) == 2 and report.count("| max-num-seqs | throughput tokens/s |") == 1
    assert ("knee at max-num-seqs=" in report) or ("no knee over" in report)
    assert "bench sweep [" in err and "2/2" in err          # the progress bar, on stderr
    assert "| max-num-seqs |" in out and "curve.png" in out


@pytest.mark.parametrize("args, words", [
    (["--max-num-seqs", "1,2", "--block-size", "16,32"], "one variable at a time"),
    (["--max-num-seqs", "4"], "comma list of two or more"),
    (["--max-num-seqs", "1,x"], "--max-num-seqs: must be a whole number in [1, 1024] requests, got 'x'"),
    (["--enable-chunked-prefill", "on,maybe"], "--enable-chunked-prefill: must be true or false, got 'maybe'"),
    (["--policy", "fcfs,lifo"], "--policy: 'lifo' is not one of fcfs, short-first, length-bucket"),
    (["--max-num-seqs", "1,2", "--rate", "2", "--concurrency", "4"], "choose"),
    (["--max-num-seqs", "1,2", "--duration", "2", "--warmup", "3"], "--warmup"),
    (["--block-size", "16,7"], "--block-size: must be a whole number in [8, 1024] tokens, got 7"),
    (["--max-num-seqs", "1,2", "--p99-factor", "0.9"], "--p99-factor"),
])
def test_bad_sweeps_fail_with_one_line(tmp_path, capsys, args, words):
    code, _, err = _run(capsys, "sweep", *TINY, *args, "--out", str(tmp_path / "o"))
    assert code == 3 and words in err and "Traceback" not in err
    assert not (tmp_path / "o" / "results.json").exists()


@pytest.mark.parametrize("args, words", [
    (["--max-num-seqs", "1,2"], "engine setting of the remote endpoint"),
    (["--rate", "1,2", "--block-size", "32"], "cannot be changed from here: --block-size"),
    (["--rate", "1,2", "--scenario", "healthy"], "--scenario"),
])
def test_a_remote_endpoint_takes_only_load_settings(tmp_path, capsys, args, words):
    code, _, err = _run(capsys, "sweep", "--url", "http://127.0.0.1:9", *args, "--out", str(tmp_path / "o"))
    assert code == 3 and words in err and "Traceback" not in err


def test_stress_refuses_a_load_it_cannot_raise(tmp_path, capsys):
    code, _, err = _run(capsys, "stress", *TINY, "--vary", "concurrency", "--out", str(tmp_path / "o"))
    assert code == 3 and "--concurrency" in err


def test_stress_cannot_raise_a_remote_engine_setting(tmp_path, capsys):
    code, _, err = _run(capsys, "stress", "--url", "http://127.0.0.1:9", "--vary", "max-num-seqs",
                        "--out", str(tmp_path / "o"))
    assert code == 3 and "engine setting of the remote endpoint" in err
