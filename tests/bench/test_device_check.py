"""bench/device_check.sh, the script a session lent a GPU runs as is, in its dry run: it parses, skips the GPU
steps saying why, runs what it can (the CUDA tests collected, the bench drivers on the CPU, topology from a
snapshot when there is no NVML), writes its summary and exits 0."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "device_check.sh"
GPU_STEPS = ("cuda-tests", "bench-engine", "bench-hooks-overhead")


def test_the_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True).returncode == 0


@pytest.mark.slow
def test_a_dry_run_skips_the_gpu_steps_says_why_and_exits_0(tmp_path):
    out = tmp_path / "out"
    # 16 s of work on a quiet 2-core machine: the budget leaves room for a loaded one (`make test` runs two files
    # at once), where a step it cuts is said as cut
    env = {**os.environ, "OUT": str(out), "DEVICE_CHECK_BUDGET_S": "90", "PYTHON": sys.executable}
    run = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, env=env, timeout=240)
    assert run.returncode == 0, run.stderr
    summary = json.loads((out / "summary.json").read_text())
    steps = {s["step"]: s for s in summary["steps"]}
    assert summary["dry_run"] is True and summary["seconds"] <= 90 + 15
    for name in GPU_STEPS:
        assert steps[name]["status"] == "skipped" and "--dry-run" in steps[name]["detail"]
    assert steps["cuda-tests-collect"]["status"] == "ok"
    collected = (out / "cuda-tests.log").read_text()
    assert "tests/engine/test_engine_attention.py: 1" in collected
    assert "tests/engine/test_cuda_device.py: 3" in collected
    for name in ("bench-engine-cpu-smoke", "bench-hooks-overhead-cpu-smoke"):
        assert steps[name]["status"] in ("ok", "cut"), steps[name]    # a loaded CI machine may run out of budget
        if steps[name]["status"] == "ok":
            assert json.loads((out / f"{name}.json").read_text())
    if steps["probe-record"]["status"] == "skipped":          # no NVML here: the topology of the bundled snapshot
        assert steps["probe-record"]["detail"].startswith("no NVML")
        assert steps["topo-bundled-snapshot"]["status"] == "ok"
        assert "NV12" in (out / "topo-bundled-snapshot.txt").read_text()
    else:
        assert steps["probe-record"]["status"] == "ok" and (out / "nvml-snapshot.json").stat().st_size
    assert (out / "env.txt").read_text().startswith("date: ")
    assert "skipped" in (out / "summary.txt").read_text() and "summary.tsv" not in os.listdir(out)


def test_an_unknown_argument_is_refused():
    run = subprocess.run(["bash", str(SCRIPT), "--nope"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and "--nope" in run.stderr


def test_the_benches_refuse_a_device_this_machine_lacks_in_one_line():
    bench = SCRIPT.parent
    for script in ("engine.py", "hooks_overhead.py"):
        run = subprocess.run([sys.executable, str(bench / script), "--smoke", "--device", "cuda:99"],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr, run.stderr
        assert "error: --device: cuda:99 asked for, but torch sees" in run.stderr.strip().splitlines()[-1]
