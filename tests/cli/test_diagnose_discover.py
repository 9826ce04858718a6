"""`stagelens diagnose --discover`: the engines found on this node (agent/discovery) each judged on its own, with
the GPUs its process holds (CUDA_VISIBLE_DEVICES) and how it was found. The engines are look-alike processes
(tests/helpers/fake_engines.py) answering /metrics with real published captures; other engines this machine
runs are found too, and are not asserted on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli_run import assert_one_line_error, stagelens
from tests.helpers.fake_engines import FakeEngines, free_port

REAL = Path(__file__).parents[1] / "fixtures" / "real"
DGX = str(Path(__file__).parents[1] / "fixtures" / "nvml" / "dgx_a100.json")


@pytest.fixture
def fakes(tmp_path):
    engines = FakeEngines(tmp_path / "fakes")
    yield engines
    engines.stop_all()


def test_each_engine_found_is_judged_with_its_gpus(fakes):
    idle, busy = free_port(), free_port()
    fakes.start("vllm", "--port", str(idle), "--host", "127.0.0.1", "--model", "qwen3-4b", "--serve-metrics",
                str(REAL / "vllm_v1_0.10_idle_qwen3_4b.txt"), env={"CUDA_VISIBLE_DEVICES": "0,1"})
    fakes.start("sglang", "--port", str(busy), "--host", "127.0.0.1", "--model-path", "llama", "--serve-metrics",
                str(REAL / "sglang_0.4_overloaded_llama31_8b.txt"), env={"CUDA_VISIBLE_DEVICES": "2,3"})
    proc = stagelens("--nvml-snapshot", DGX, "diagnose", "--discover", "--duration", "3", "--json", timeout=240)
    assert proc.stdout, proc.stderr
    doc = json.loads(proc.stdout)
    by_url = {e["url"]: e for e in doc["engines"]}
    mine = by_url[f"http://127.0.0.1:{idle}"], by_url[f"http://127.0.0.1:{busy}"]
    assert [(e["kind"], e["gpus"]) for e in mine] == [("vllm", ["0", "1"]), ("sglang", ["2", "3"])]
    assert all(f"127.0.0.1:{port}" in e["found"] for e, port in zip(mine, (idle, busy), strict=True))
    assert mine[0]["engine"].startswith("vLLM V1") and mine[0]["verdict"] in ("ok", "warn"), mine[0]
    assert mine[1]["engine"].startswith("SGLang 0.4") and mine[1]["root_stage"] == "scheduler", mine[1]
    assert proc.returncode in (1, 2, 3) and doc["verdict"] in ("warn", "firing")


def test_a_named_url_that_is_the_agent_is_refused(fakes):
    port = free_port()
    fakes.start("stagelens", "serve", "--listen", f"127.0.0.1:{port}", "--port", str(port))
    proc = stagelens("diagnose", "--discover", "--engine-url", f"vllm=http://127.0.0.1:{port}", "--json")
    assert_one_line_error(proc, "is the stagelens agent itself")
