"""The driver backend's error mapping, exercised with pynvml's own exceptions (no mocks of our code)."""

from __future__ import annotations

import ctypes
import logging

import pynvml
import pytest

from stagelens.probes import nvml_reader
from stagelens.probes.errors import NoDriverError
from stagelens.probes.nvml_backend import FI_NVLINK_RX_KIB, FI_NVLINK_TX_KIB, error_class, error_name
from stagelens.probes.nvml_reader import DeviceLost, NvmlReader
from stagelens.probes.nvml_real import RealBackend, cpulist
from stagelens.probes.nvml_snapshot import SnapshotBackend


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is installed on this machine")
def test_without_a_driver_nvmlinit_raises_library_not_found_and_we_say_no_driver():
    b = RealBackend()  # constructing never touches the driver
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        b.device_count()
    with pytest.raises(NoDriverError, match=r"no NVIDIA driver found: the NVML library .* not be loaded"):
        NvmlReader(b).get("device_count")
    b.close()


def test_error_names_round_trip_to_pynvml_classes():
    for name in ("NotSupported", "GpuIsLost", "NoPermission", "Unknown", "LibraryNotFound", "DriverNotLoaded",
                 "FunctionNotFound", "InvalidArgument"):
        cls = error_class(name)
        assert cls is not None and issubclass(cls, pynvml.NVMLError)
        assert error_name(cls()) == name
        assert type(pynvml.NVMLError(cls().value)) is cls  # what pynvml raises for that return code
    assert error_class("Nonsense") is None


def snap(errors: dict) -> SnapshotBackend:
    return SnapshotBackend({"format": "stagelens-nvml/1", "devices": [
        {"index": 0, "name": "GPU", "uuid": "GPU-0", "pci_bus_id": "00000000:01:00.0", "errors": errors,
         "series": {"power_mw": [1000]}},
        {"index": 1, "name": "GPU", "uuid": "GPU-1", "pci_bus_id": "00000000:02:00.0"}]})


def test_driver_not_loaded_is_no_driver():
    with pytest.raises(NoDriverError, match="kernel driver is not loaded"):
        NvmlReader(SnapshotBackend({"error": "DriverNotLoaded"})).get("device_count")


def test_gpu_is_lost_raises_device_lost_for_that_device_only():
    r = NvmlReader(snap({"*": "GpuIsLost"}))
    with pytest.raises(DeviceLost) as err:
        r.get("name", 0)
    assert err.value.index == 0
    assert r.get("name", 1) == "GPU"


def test_function_not_found_is_absent_and_logged_once(caplog, monkeypatch):
    monkeypatch.setattr(nvml_reader, "_missing_logged", set())  # start from a process that logged nothing
    r = NvmlReader(snap({"nvmlDeviceGetPowerUsage": "FunctionNotFound"}))
    with caplog.at_level(logging.WARNING, logger="stagelens.probes.nvml_reader"):
        assert r.get("power_mw", 0) is None
        assert r.get("power_mw", 0) is None
        assert NvmlReader(snap({"nvmlDeviceGetPowerUsage": "FunctionNotFound"})).get("power_mw", 0) is None
    logged = [rec for rec in caplog.records if "nvmlDeviceGetPowerUsage" in rec.getMessage()]
    assert len(logged) == 1
    assert r.device_errors(0) == {"nvmlDeviceGetPowerUsage": "FunctionNotFound"}


def test_other_errors_are_absent_values_recorded_per_device():
    r = NvmlReader(snap({"nvmlDeviceGetPowerUsage": "Unknown"}))
    assert r.get("power_mw", 0) is None
    assert r.device_errors(0) == {"nvmlDeviceGetPowerUsage": "Unknown"}
    assert r.get("power_mw", 1) is None and r.unsupported(1) == ["nvmlDeviceGetPowerUsage"]


def test_field_values_check_each_values_own_return(monkeypatch):
    # Stand in for the driver at pynvml's C boundary: the call succeeds, one value failed.
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: f"handle{i}")

    def fake_field_values(handle, fields):
        values = (pynvml.c_nvmlFieldValue_t * len(fields))()
        for n, (fid, scope) in enumerate(fields):
            values[n].fieldId, values[n].scopeId = fid, scope
            values[n].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            values[n].value.ullVal = 1000 + n
        values[1].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", fake_field_values)
    out = RealBackend().field_values(0, [(FI_NVLINK_TX_KIB, 0), (FI_NVLINK_RX_KIB, 0), (FI_NVLINK_TX_KIB, 1)])
    assert out[0] == 1000 and out[2] == 1002
    assert isinstance(out[1], pynvml.NVMLError_NotSupported)


def test_cpulist_from_an_affinity_mask():
    # DGX A100 GPU0: CPUs 48-63 and 176-191
    words = [0] * 4
    for cpu in [*range(48, 64), *range(176, 192)]:
        words[cpu // 64] |= 1 << (cpu % 64)
    assert cpulist(words) == "48-63,176-191"
    assert cpulist([0b1011]) == "0-1,3"
    assert cpulist([0, 0]) == ""
    assert cpulist([1 << 63, 1]) == "63-64"
