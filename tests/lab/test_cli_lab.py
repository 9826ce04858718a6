"""`stagelens lab` as a user runs it: figures in JSON, and bad input as one line with exit 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

STAGELENS = [str(Path(sys.executable).parent / "stagelens")]


def _run(args, model_dir, timeout=120):
    env = dict(os.environ, XDG_CACHE_HOME=str(Path(model_dir).parent))
    return subprocess.run(STAGELENS + args, capture_output=True, text=True, timeout=timeout, env=env)


def test_lab_json_reports_the_serving_figures(model_dir):
    proc = _run(["lab", "--json", "--model", "tiny", "--duration", "2", "--rate", "20", "--max-model-len", "256",
                 "--prompt-len", "uniform:8:64", "--output-len", "8", "--model-dir", model_dir], model_dir)
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout)
    for key in ("throughput_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "latency_p50_s", "latency_p99_s",
                "requests_finished", "preemptions", "kv_waste_ratio"):
        assert key in figures, key
    assert figures["requests_finished"] == figures["requests_submitted"] > 10
    assert figures["throughput_tokens_per_s"] > 0
    assert 0 <= figures["kv_waste_ratio"] < 0.5
    assert figures["ttft_p50_s"] <= figures["ttft_p99_s"] <= figures["latency_p99_s"]
    assert figures["config"]["model"] == "tiny"


def test_lab_table_on_a_closed_loop(model_dir):
    proc = _run(["lab", "--model", "tiny", "--duration", "1.5", "--concurrency", "4", "--max-model-len", "256",
                 "--prompt-len", "lognormal:20:0.5", "--output-len", "uniform:4:8", "--allocator", "contiguous",
                 "--model-dir", model_dir], model_dir)
    assert proc.returncode == 0, proc.stderr
    assert "closed loop x4" in proc.stdout and "contiguous KV" in proc.stdout
    assert "throughput" in proc.stdout


@pytest.mark.parametrize("args, words", [
    (["--block-size", "24"], "--block-size"),
    (["--max-num-batched-tokens", "8"], "--max-num-batched-tokens"),
    (["--kv-cache-memory", "64KiB"], "--kv-cache-memory"),
    (["--rate", "-1"], "--rate"),
    (["--model", "enormous"], "--model"),
    (["--prompt-len", "gaussian:3"], "--prompt-len"),
    (["--long-prompt-share", "2"], "--long-prompt-share"),
])
def test_bad_input_is_one_line_and_exit_3(model_dir, args, words):
    proc = _run(["lab", "--model", "tiny", "--duration", "1", "--max-model-len", "256", "--model-dir", model_dir]
                + args, model_dir)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stagelens: error:") and words in lines[0], proc.stderr
