"""The sampler-facing API: one JSON-serialisable node sample with per-collector status."""

from __future__ import annotations

import json
import os
from pathlib import Path

from stagelens.probes.nvml_snapshot import SnapshotBackend
from stagelens.probes.sample import COLLECTORS, NodeProbe, open_backend

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvml"


def probe(name: str, **kw) -> NodeProbe:
    return NodeProbe(open_backend(str(FIXTURES / name)), **kw)


def test_a_full_sample_is_plain_json_with_every_collector():
    p = probe("dgx_a100.json", pid=os.getpid())
    p.sample()
    d = p.sample().to_dict()
    assert json.loads(json.dumps(d)) == d
    assert [c["name"] for c in d["collectors"]] == list(COLLECTORS)
    assert all(c["success"] and c["error"] is None and c["duration_seconds"] >= 0 for c in d["collectors"])
    assert d["version"] == 1 and d["hostname"]
    assert d["driver"]["state"] == "ok" and d["driver"]["driver_version"] == "550.54.15"
    assert d["driver"]["cuda_driver_version"] == 12040
    assert len(d["gpus"]) == 8 and d["time_monotonic"] == 1.0
    assert d["topology"]["matrix"][0][1] == "NV12"
    assert d["host"]["process"]["pid"] == os.getpid()


def test_a_lost_gpu_is_marked_and_the_others_are_sampled():
    d = probe("gpu_lost.json", host=False).sample().to_dict()
    assert [g["lost"] for g in d["gpus"]] == [False, False, True, False]
    lost = d["gpus"][2]
    assert lost["pcie"] is None and lost["utilization_gpu_ratio"] is None
    assert d["gpus"][3]["pcie"]["gen"] == 4 and d["gpus"][3]["utilization_gpu_ratio"] == 0.3
    assert all(c["success"] for c in d["collectors"])


def test_no_driver_is_a_node_state_not_a_crash():
    d = probe("no_driver.json", host=True).sample().to_dict()
    assert d["driver"]["state"] == "no_driver"
    assert "no NVIDIA driver found" in d["driver"]["message"]
    status = {c["name"]: c for c in d["collectors"]}
    assert status["nvml"]["success"] is False and "no NVIDIA driver" in status["nvml"]["error"]
    assert status["topology"]["success"] is False and status["links"]["success"] is False
    assert status["host"]["success"] is True and d["host"]["cpu_count"] > 0
    assert d["gpus"] == []


def test_the_real_backend_on_this_node_gives_a_sample_either_way():
    d = NodeProbe(host=False).sample().to_dict()  # no driver here: a state; with one: GPUs
    assert d["driver"]["state"] in ("ok", "no_driver")
    assert (d["driver"]["state"] == "ok") == d["collectors"][0]["success"]


def test_switches_and_disabled_collectors():
    d = probe("pcie_2gpu_phb.json", host=False, topology=False).sample().to_dict()
    assert [c["name"] for c in d["collectors"]] == ["nvml", "links"]
    assert d["topology"] is None and d["host"] is None


def test_open_backend_picks_the_snapshot():
    b = open_backend(str(FIXTURES / "pcie_2gpu_phb.json"))
    assert isinstance(b, SnapshotBackend) and b.live is False


def test_probes_import_neither_torch_nor_the_agent():
    import subprocess
    import sys

    code = ("import sys, probes; from stagelens.probes.sample import NodeProbe; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'agent', 'engine_hooks')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == "[]"
