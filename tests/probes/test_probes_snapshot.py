"""The snapshot backend: tick semantics, errors as real pynvml exceptions, and malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest

from stagelens.probes.errors import NoDriverError, SnapshotError
from stagelens.probes.nvml_backend import FI_NVLINK_RX_KIB, FI_NVLINK_TX_KIB
from stagelens.probes.nvml_reader import DeviceLost, NvmlReader
from stagelens.probes.nvml_snapshot import SnapshotBackend, load_snapshot

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nvml"


def backend(name: str) -> SnapshotBackend:
    return SnapshotBackend.from_file(str(FIXTURES / name))


def minimal(**device) -> dict:
    dev = {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-x", "pci_bus_id": "00000000:07:00.0"}
    dev.update(device)
    return {"format": "stagelens-nvml/1", "devices": [dev]}


def test_every_fixture_loads():
    for path in sorted(FIXTURES.glob("*.json")):
        load_snapshot(str(path))


def test_series_advance_one_element_a_tick_and_hold_the_last():
    b = backend("pcie_saturated.json")
    rx = json.loads((FIXTURES / "pcie_saturated.json").read_text())["devices"][0]["series"]["pcie_rx_kBps"]
    seen = []
    for _ in range(len(rx) + 3):
        b.begin_tick()
        seen.append(b.pcie_throughput_kBps(0, "rx"))
    assert seen == rx + [rx[-1]] * 3
    assert b.timestamp() == (len(rx) + 2) * 1.0


def test_before_the_first_tick_reads_the_first_element():
    b = backend("dgx_a100.json")
    assert b.utilization(0) == (60, 35)


def test_static_values_and_nvlinks():
    b = backend("dgx_a100.json")
    assert b.device_count() == 8
    assert b.pci_bus_id(2) == "00000000:47:00.0"
    assert b.cpu_affinity(4) == "112-127,240-255"
    assert b.nvlink_ids(0) == list(range(12))
    assert b.nvlink_remote(0, 3) == "switch"
    assert b.common_ancestor(1, 0) == b.common_ancestor(0, 1) == "MULTIPLE"
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        b.nvlink_active(0, 12)


def test_errors_are_raised_as_pynvml_exception_classes():
    b = backend("not_supported.json")
    with pytest.raises(pynvml.NVMLError_NotSupported):
        b.pcie_replay_counter(0)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        b.temperature_c(0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        backend("gpu_lost.json").name(2)
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        backend("no_driver.json").device_count()


def test_a_missing_series_answers_not_supported_and_field_values_fail_one_by_one():
    b = backend("not_supported.json")
    b.begin_tick()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        b.clock_mhz(0, "sm")
    values = b.field_values(0, [(FI_NVLINK_TX_KIB, 0), (FI_NVLINK_RX_KIB, 0), (FI_NVLINK_TX_KIB, 1)])
    assert values[:2] == [0, 0]
    assert isinstance(values[2], pynvml.NVMLError_NotSupported)


def test_star_error_applies_to_every_call_of_that_device():
    b = SnapshotBackend(minimal(errors={"*": "Unknown"}))
    for call in (lambda: b.name(0), lambda: b.utilization(0), lambda: b.nvlink_ids(0)):
        with pytest.raises(pynvml.NVMLError_Unknown):
            call()


def test_the_reader_policy_on_snapshot_errors():
    r = NvmlReader(backend("not_supported.json"))
    assert r.get("pcie_replay_counter", 0) is None
    assert r.get("temperature_c", 0) is None
    assert r.unsupported(0) == ["nvmlDeviceGetPcieReplayCounter"]
    assert r.device_errors(0) == {"nvmlDeviceGetTemperature": "NoPermission"}
    with pytest.raises(DeviceLost):
        NvmlReader(backend("gpu_lost.json")).get("name", 2)
    with pytest.raises(NoDriverError, match="no NVIDIA driver found"):
        NvmlReader(backend("no_driver.json")).get("device_count")


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "snap.json"
    path.write_text(text)
    return str(path)


def test_bad_json_names_the_file_and_line(tmp_path):
    path = write(tmp_path, '{"format": "stagelens-nvml/1",\n "devices": [\n  {"index": 0,,}\n ]}')
    with pytest.raises(SnapshotError) as err:
        load_snapshot(path)
    assert str(err.value).startswith(f"{path}:3: not valid JSON")
    assert err.value.line == 3 and err.value.path == path
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a JSON object"),
        ({"format": "stagelens-nvml/2", "devices": []}, "format: expected 'stagelens-nvml/1'"),
        ({"devices": []}, "format: expected"),
        ({"format": "stagelens-nvml/1"}, "missing key 'devices'"),
        ({"format": "stagelens-nvml/1", "devices": [{"name": "x"}]}, "devices[0]: missing key 'index'"),
        ({"format": "stagelens-nvml/1", "devices": [{"index": 0, "name": "x", "uuid": "u"}]},
         "devices[0]: missing key 'pci_bus_id'"),
        (minimal(index=1), "indices must be 0..0"),
        (minimal(errors={"nvmlDeviceGetName": "Exploded"}), "unknown NVML error 'Exploded'"),
        (minimal(series={"utilisation": [1]}), "unknown series 'utilisation'"),
        (minimal(series={"pcie_tx_kBps": []}), "series.pcie_tx_kBps: expected a non-empty list"),
        (minimal(series={"nvlink_tx_kib": {"0": ["a"]}}), "series.nvlink_tx_kib.0: expected"),
        (minimal(nvlinks=[{"active": True}]), "nvlinks[0]: missing key 'link'"),
        (minimal(pcie={"gen": "4"}), "devices[0].pcie"),
        ({**minimal(), "pcie_common_ancestor": {"0-0": "NODE"}}, "pcie_common_ancestor.0-0"),
        ({**minimal(), "pcie_common_ancestor": {}, "interval_s": 0}, "interval_s"),
        ({"error": "NoSuchThing"}, "unknown NVML error"),
    ],
)
def test_malformed_snapshots_are_refused_with_the_file_and_what_is_wrong(tmp_path, data, message):
    path = write(tmp_path, json.dumps(data))
    with pytest.raises(SnapshotError) as err:
        SnapshotBackend.from_file(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(SnapshotError, match="cannot read NVML snapshot"):
        load_snapshot(str(tmp_path / "nope.json"))


def test_a_lost_device_needs_no_other_keys():
    lost = {"index": 0, "errors": {"*": "GpuIsLost"}}
    b = SnapshotBackend({"format": "stagelens-nvml/1", "devices": [lost]})
    assert b.device_count() == 1
