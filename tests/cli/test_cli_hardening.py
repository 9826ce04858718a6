"""Hostile input to the CLI: each case is the input that once gave a traceback, the wrong exit status
or was accepted, run through the real `stagelens`; now one line on stderr and exit 3 (UNKNOWN)."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stagelens.diagnosis import DiagnosisConfig, diagnose, load_config
from stagelens.diagnosis.config import Threshold, apply_document
from stagelens.diagnosis.model import Diagnosis
from stagelens.engine_hooks.engine.config import MAX_TOKENS
from stagelens.errors import EXIT_CRITICAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNKNOWN, EXIT_WARNING, UserError
from stagelens.lab.scenarios import SCENARIOS
from stagelens.lab.settings import build_configs
from stagelens.lab.workload import LengthDist
from stagelens.tui.local_feed import ENDLESS_S
from stagelens.vocabulary import EXIT_CODES
from tests.helpers.cli_run import ROOT, STAGELENS, assert_one_line_error, stagelens
from tests.helpers.frame_builders import engine_snapshot, frame, series

NVML = ROOT / "tests" / "fixtures" / "nvml"
HEALTHY = str(ROOT / "tests" / "fixtures" / "bundles" / "healthy.jsonl")


# --- 1. one exit-status contract ------------------------------------------------------------------
def test_the_exit_statuses_are_the_monitoring_plugin_ones_and_one_fact():
    assert (EXIT_OK, EXIT_WARNING, EXIT_CRITICAL, EXIT_UNKNOWN) == (0, 1, 2, 3)
    assert EXIT_CODES == {"ok": EXIT_OK, "warn": EXIT_WARNING, "firing": EXIT_CRITICAL, "unknown": EXIT_UNKNOWN}
    assert [Diagnosis(v, None, []).exit_code for v in ("ok", "warn", "firing", "unknown", "bogus")] == [0, 1, 2, 3, 3]


@pytest.mark.parametrize("args, words", [
    (["lab", "--no-such-flag"], ["--no-such-flag"]),                # click: exit 2 before, CRITICAL to a monitor
    (["lab", "--allocator", "slab"], ["--allocator", "slab"]),
    (["diagnose", "--replay"], ["--replay"]),
    (["runbook"], ["NAME"]),
    (["no-such-command"], ["no-such-command"]),
])
def test_usage_errors_exit_unknown_not_critical(args, words):
    assert_one_line_error(stagelens(*args), *words)


def test_diagnose_help_states_the_contract():
    out = stagelens("diagnose", "--help").stdout
    assert "0 ok, 1 warn, 2 firing" in out and "3 unknown" in out


_BOOM = ("import stagelens.cli as c\n"
         "@c.cli.command()\n"
         "def boom():\n"
         "    raise RuntimeError('state\\nlost')\n"
         "c.main(['boom'])\n")


def test_an_uncaught_exception_is_one_line_and_unknown():
    proc = subprocess.run([sys.executable, "-c", _BOOM], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if k != "STAGELENS_DEBUG"})
    assert proc.returncode == EXIT_UNKNOWN and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "stagelens: internal error: RuntimeError: state lost (set STAGELENS_DEBUG=1 for the traceback)"]


def test_stagelens_debug_prints_the_traceback_too():
    proc = subprocess.run([sys.executable, "-c", _BOOM], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "STAGELENS_DEBUG": "1"})
    assert proc.returncode == EXIT_UNKNOWN and "Traceback" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "stagelens: internal error: RuntimeError: state lost"


def test_sigint_still_ends_a_one_shot_command_with_130():
    # As a terminal's foreground command gets it: a test run started in the background (`make test &`) would
    # otherwise pass on an ignored SIGINT, which Python then leaves ignored, as a shell asked.
    proc = subprocess.Popen([STAGELENS, "--nvml-snapshot", str(NVML / "dgx_a100.json"), "diagnose", "--duration",
                             "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(5)     # past the imports: the interrupt lands while the node is sampled
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_INTERRUPTED and "stagelens: interrupted" in err and "Traceback" not in err


# --- 2. numbers from the CLI and config files ------------------------------------------------------
@pytest.mark.parametrize("args, words", [
    (["--max-model-len", "1"], ["--max-model-len", "[2, 131072] tokens"]),
    (["--temperature", "-1"], ["--temperature", "[0, 10]"]),
    (["--seed", "1e20"], ["--seed", "whole number"]),
    (["--seed", str(2**63)], ["--seed", str(2**63 - 1)]),
    (["--device", "bogus"], ["--device", "'bogus'"]),
    (["--prompt-len", "lognormal:1e308:100"], ["--prompt-len", "MEDIAN"]),
    (["--prompt-len", "lognormal:100:1e308"], ["--prompt-len", "SIGMA"]),
    (["--rate", "inf"], ["--rate", "finite", "requests/s"]),
    (["--rate", "nan"], ["--rate", "finite", "requests/s"]),
    (["--rate", "0"], ["--rate", "(0, 1000] requests/s"]),
    (["--models", "100000"], ["--models", "[1, 64] models"]),
    (["--concurrency", "100000"], ["--concurrency", "1024"]),
    (["--duration", "1e9"], ["--duration", "86400] s"]),
    (["--max-num-seqs", "100000"], ["--max-num-seqs", "1024"]),
    (["--max-num-batched-tokens", "10000000"], ["--max-num-batched-tokens", "131072"]),
    (["--long-prompt-len", "10000000"], ["--long-prompt-len", "131072"]),
    (["--kv-cache-memory", "9" * 400], ["--kv-cache-memory", "bytes"]),
    (["--interval", "0"], ["--interval", "s"]),
    (["--interval", "nan"], ["--interval", "finite"]),
    (["--threshold", "kv_fragmentation_ratio=nan:0.3"], ["--threshold", "finite", "ratio"]),
])
def test_lab_refuses_bad_numbers_before_building_anything(tmp_path, args, words):
    models = tmp_path / "models"
    proc = stagelens("lab", "--model", "tiny", "--max-model-len", "256", "--duration", "1",
                     "--model-dir", str(models), *args)
    assert_one_line_error(proc, *words)
    assert not models.exists() or not any(models.iterdir())     # no weight file was written


def test_a_cuda_device_this_node_lacks_is_refused_before_the_engine(tmp_path):
    proc = stagelens("lab", "--model", "tiny", "--device", "cuda:99", "--model-dir", str(tmp_path))
    assert_one_line_error(proc, "--device", "cuda:99", "CUDA device")
    assert not any(tmp_path.iterdir())


def test_every_scenario_and_documented_setting_lies_inside_the_bounds():
    for spec in SCENARIOS.values():
        build_configs({}, spec.defaults)
    build_configs({"duration": ENDLESS_S})                                    # the TUI's endless local run
    build_configs({"max_num_seqs": 16, "concurrency": 16, "duration": 15})    # the batch-size sweep (docs/measurements)
    build_configs({"enable_chunked_prefill": True, "max_num_batched_tokens": 8192,   # the GPU recommendation
                   "long_prefill_token_threshold": 2048})


def test_lognormal_lengths_never_overflow_and_stay_capped():
    rng = random.Random(0)
    widest = LengthDist.parse("lognormal:131072:4")
    assert all(1 <= widest.sample(rng) <= MAX_TOKENS for _ in range(20000))


@pytest.mark.parametrize("toml, words", [
    ("[diagnosis]\nwindow_s = nan\n", ["window_s", "finite"]),
    ("[diagnosis]\nwindow_s = inf\n", ["window_s", "finite"]),
    ("[diagnosis]\nwindow_s = 1e9\n", ["window_s", "3600] s"]),
    ("[diagnosis]\nrise = 2.5\n", ["rise", "whole number"]),
    ("[thresholds.kv_fragmentation_ratio]\nwarn = nan\n", ["kv_fragmentation_ratio", "warn", "finite"]),
    ("[thresholds.scheduler_wait_p99]\nfiring = -inf\n", ["scheduler_wait_p99", "firing", "seconds"]),
])
def test_a_config_file_with_a_non_finite_or_out_of_range_number_is_refused(tmp_path, toml, words):
    path = tmp_path / "stagelens.toml"
    path.write_text(toml)
    assert_one_line_error(stagelens("diagnose", "--config", str(path), "--replay", HEALTHY), str(path), *words)


def test_a_binary_config_file_is_one_line(tmp_path):
    path = tmp_path / "random.toml"
    path.write_bytes(bytes(random.Random(1).randrange(256) for _ in range(4096)))
    assert_one_line_error(stagelens("diagnose", "--config", str(path), "--replay", HEALTHY), str(path))


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_threshold_flag_must_be_finite_and_not_negative(value):
    proc = stagelens("diagnose", "--threshold", f"kv_fragmentation_ratio={value}:0.3", "--replay", HEALTHY)
    assert_one_line_error(proc, "--threshold", "warn", ">= 0 (ratio)")


# --- 3. a NaN is no data, never ok; a config never holds one -------------------------------------
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "0.5", True])
def test_a_signal_that_is_not_a_finite_number_is_unknown_not_ok(bad):
    """A frame read back refuses it (tests/engine/test_engine_snapshot.py); an in-process source could still set one."""
    frames = series([{}] * 4)
    for f in frames:
        f.engine.window.kv.fragmentation_ratio = bad
    d = diagnose(frames)
    row = next(e for e in d.stage("kv_cache").evidence if e.signal == "kv_fragmentation_ratio")
    assert row.state == "unknown" and row.value is None
    json.dumps(d.to_dict(), allow_nan=False)          # every surface can serialise it


def test_frames_whose_every_figure_is_nan_give_no_verdict():
    nan = math.nan
    frames = [frame(i, engine_snapshot(scheduler={"waiting_share": 1.0}), host={"cpu_iowait_ratio": nan})
              for i in range(4)]
    for f in frames:     # as an in-process source could set them: a frame read back refuses a NaN
        w = f.engine.window
        for k in ("fragmentation_ratio", "access_efficiency", "effective_bandwidth_ratio", "bandwidth_swing_cv"):
            setattr(w.kv, k, nan)
        for k in ("decided_wait_p99_s", "head_of_line_share", "busy_ratio_while_waiting", "budget_use_while_waiting"):
            setattr(w.scheduler, k, nan)
        w.scheduler.wait_seconds_by_reason = {"model_loading": nan}
        w.cold_path.step_time_inflation = nan
        f.engine.counters.preemptions_with_free_memory_total = nan
    d = diagnose(frames)
    assert d.verdict == "unknown" and d.exit_code == EXIT_UNKNOWN
    assert {e.state for s in d.stages for e in s.evidence} == {"unknown"}


@pytest.mark.parametrize("build", [
    lambda: DiagnosisConfig(window_s=math.nan),
    lambda: DiagnosisConfig(rise=math.inf),
    lambda: setattr(DiagnosisConfig(), "window_s", math.inf),
    lambda: setattr(DiagnosisConfig(), "clear", 0),
    lambda: Threshold(math.nan, None),
    lambda: apply_document(DiagnosisConfig(), "served", {"diagnosis": {"window_s": math.nan}}),
    lambda: apply_document(DiagnosisConfig(), "served", {"thresholds": {"kv_fragmentation_ratio": {"warn": math.inf}}}),
    lambda: load_config(None, ["kv_fragmentation_ratio=0.1:nan"]),
])
def test_a_diagnosis_config_never_holds_a_non_finite_number(build):
    with pytest.raises(UserError):
        build()


def test_the_served_config_is_always_strict_json():
    json.dumps(load_config(None, ["kv_fragmentation_ratio=0.1:0.2"]).to_dict(), allow_nan=False)


# --- 4. NVML snapshots ----------------------------------------------------------------------------
def _snapshot_with(tmp_path, **device) -> Path:
    data = json.loads((NVML / "pcie_2gpu_phb.json").read_text())
    data["devices"][0].update(device)
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(data))          # json writes NaN and Infinity as Python reads them
    return path


@pytest.mark.parametrize("device, words", [
    ({"numa_node": math.nan}, ["numa_node"]),
    ({"memory_total_bytes": math.inf}, ["memory_total_bytes"]),
    ({"numa_node": "3"}, ["numa_node"]),
    ({"memory_total_bytes": "85899345920"}, ["memory_total_bytes"]),
    ({"pcie": {"gen": 4.5}}, ["pcie"]),
    ({"series": {"utilization_gpu": [50, math.nan]}}, ["utilization_gpu"]),
])
def test_a_snapshot_with_a_non_finite_or_mistyped_field_is_one_line(tmp_path, device, words):
    path = _snapshot_with(tmp_path, **device)
    assert_one_line_error(stagelens("--nvml-snapshot", str(path), "topo"), f"stagelens: error: {path}: ", *words)


def test_a_binary_snapshot_is_one_line(tmp_path):
    path = tmp_path / "snapshot.bin"
    path.write_bytes(b"\xff\xfe\x00" + bytes(random.Random(2).randrange(256) for _ in range(4096)))
    assert_one_line_error(stagelens("--nvml-snapshot", str(path), "topo"), f"stagelens: error: {path}: ")


def test_serve_refuses_a_bad_snapshot_instead_of_answering_500(tmp_path):
    path = _snapshot_with(tmp_path, numa_node=math.nan)
    assert_one_line_error(stagelens("--nvml-snapshot", str(path), "serve", "--listen", "127.0.0.1:0"),
                          str(path), "numa_node")


# --- 5. runbook names -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["x" * 300, "../../etc/passwd", "a\x01b"])
def test_a_runbook_name_that_is_no_runbook_is_one_line(name):
    assert_one_line_error(stagelens("runbook", name), "no runbook named")
