"""The node sample's JSON read back typed and checked (probes.sample_json): real samples come back byte for
byte, a field of the wrong type is refused by its name, and the frame reader names it from the frame down."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from stagelens.frame import Frame, FrameError
from stagelens.probes.gpu import GpuSample
from stagelens.probes.links import PcieSample
from stagelens.probes.sample import NodeProbe, NodeSample, NodeSampleError, open_backend

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BUNDLES = sorted((FIXTURES / "bundles").glob("*.jsonl"))
SNAPSHOTS = sorted((FIXTURES / "nvml").glob("*.json"))


def recorded_samples() -> list[dict]:
    """Every node sample of the recorded bundles, as written."""
    out = []
    for path in BUNDLES:
        for line in path.read_text().splitlines()[1:]:
            record = json.loads(line)
            if record.get("kind") == "frame" and record["frame"]["node_sample"] is not None:
                out.append(record["frame"]["node_sample"])
    return out


def probed(snapshot: Path) -> dict:
    """A second tick of the probe on an NVML snapshot (rates measured), its host included, as JSON."""
    probe = NodeProbe(open_backend(str(snapshot)), pid=None)
    probe.sample()
    return json.loads(json.dumps(probe.sample().to_dict()))


@pytest.fixture(scope="module")
def dgx() -> dict:
    return probed(FIXTURES / "nvml" / "dgx_a100.json")


def test_every_recorded_sample_reads_back_byte_for_byte():
    samples = recorded_samples()
    assert len(samples) >= 50
    for data in samples:
        sample = NodeSample.from_dict(data)
        assert isinstance(sample.gpus[0], GpuSample) and isinstance(sample.gpus[0].pcie, PcieSample)
        assert json.dumps(sample.to_dict()) == json.dumps(data)


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=lambda p: p.stem)
def test_every_probed_snapshot_reads_back_as_written(snapshot):
    data = probed(snapshot)
    assert json.dumps(NodeSample.from_dict(data).to_dict()) == json.dumps(data)


def test_the_attributes_are_the_json_figures(dgx):
    sample = NodeSample.from_dict(dgx)
    link = sample.gpus[3].nvlinks[11]
    assert link.active is dgx["gpus"][3]["nvlinks"][11]["active"]
    assert sample.gpus[3].pcie.tx_bytes_per_second == dgx["gpus"][3]["pcie"]["tx_bytes_per_second"]
    assert sample.topology.matrix == dgx["topology"]["matrix"] and sample.host.cpu_count == dgx["host"]["cpu_count"]
    assert sample.collector("nvml").success is True


def _set(data: dict, path: list, value) -> dict:
    changed = copy.deepcopy(data)
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return changed


WRONG = [
    (["version"], 2, "version: must be 1, got 2"),
    (["version"], True, "version: must be a finite number, got True"),
    (["hostname"], 7, "hostname: must be a string, got 7"),
    (["time_unix"], float("nan"), "time_unix: must be a finite number, got nan"),
    (["driver"], None, "driver: must be an object, got null"),
    (["driver", "state"], None, "driver.state: must be a string, got null"),
    (["gpus"], {"index": 0}, "gpus: must be a list or null, got {'index': 0}"),
    (["gpus", 1], "GPU1", "gpus[1]: must be an object, got 'GPU1'"),
    (["gpus", 1, "index"], "1", "gpus[1].index: must be a finite number, got '1'"),
    (["gpus", 1, "lost"], 0, "gpus[1].lost: must be true or false or null, got 0"),
    (["gpus", 1, "throttle_reasons"], [1], "gpus[1].throttle_reasons[0]: must be a string, got 1"),
    (["gpus", 2, "pcie", "tx_util_ratio"], "0.5", "gpus[2].pcie.tx_util_ratio: must be a finite number or null"),
    (["gpus", 2, "pcie"], [], "gpus[2].pcie: must be an object or null, got []"),
    (["gpus", 2, "nvlinks", 4, "active"], None, "gpus[2].nvlinks[4].active: must be true or false, got null"),
    (["gpus", 2, "nvlinks", 4, "errors"], {"crc": "3"}, "gpus[2].nvlinks[4].errors.crc: must be a finite number"),
    (["topology", "matrix", 0], "X NV12", "topology.matrix[0]: must be a list, got 'X NV12'"),
    (["topology", "numa_affinity", 0], "0", "topology.numa_affinity[0]: must be a finite number or null"),
    (["topology", "links", 0], 3, "topology.links[0]: must be an object, got 3"),
    (["host", "cpu_busy_percent"], None, "host.cpu_busy_percent: must be a list, got null"),
    (["host", "process"], {"pid": None}, "host.process.pid: must be a finite number, got null"),
    (["collectors", 0, "success"], "yes", "collectors[0].success: must be true or false, got 'yes'"),
]


@pytest.mark.parametrize("path, value, message", WRONG, ids=lambda v: v if isinstance(v, str) else None)
def test_a_field_of_the_wrong_type_is_refused_by_its_name(dgx, path, value, message):
    with pytest.raises(NodeSampleError, match=f"^{re.escape(message)}"):
        NodeSample.from_dict(_set(dgx, path, value))


def test_the_frame_reader_names_the_field_from_the_frame_down(dgx):
    frame = {"time_unix": 1_800_000_000.0, "time_monotonic": 1.0, "node": "n", "version": 1,
             "node_sample": _set(dgx, ["gpus", 0, "memory_used_bytes"], "12G")}
    with pytest.raises(FrameError, match=r"^node_sample\.gpus\[0\]\.memory_used_bytes: must be a finite number"):
        Frame.from_dict(frame)
    frame["node_sample"] = dgx
    assert Frame.from_dict(frame).node_sample.gpus[0].memory_used_bytes == dgx["gpus"][0]["memory_used_bytes"]


def test_unknown_keys_are_ignored_and_absent_defaults_read_as_their_default(dgx):
    data = {**dgx, "future_field": 1, "gpus": [{"index": 0, "name": "A100"}]}
    sample = NodeSample.from_dict(data)
    assert sample.gpus[0].nvlinks == [] and sample.gpus[0].pcie is None and not sample.gpus[0].lost
    assert "future_field" not in sample.to_dict()


def test_a_sample_is_not_an_object():
    with pytest.raises(NodeSampleError, match="^the sample: must be an object, got"):
        NodeSample.from_dict([1])
