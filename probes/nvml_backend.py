"""The narrow NVML surface the probes use, shared by the real (driver) and snapshot (replay)
backends.

Both backends answer by device index and raise pynvml's own NVMLError subclasses, so the error
policy in `probes.nvml_reader` is exercised identically by replay and by a real driver.
"""

from __future__ import annotations

from typing import Protocol, TypeAlias

import pynvml

# Field ids we read through nvmlDeviceGetFieldValues (scope = NVLink index): cumulative KiB.
FI_NVLINK_TX_KIB = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
FI_NVLINK_RX_KIB = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX

NVLINK_ERROR_COUNTERS = {
    "replay": pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    "recovery": pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
    "crc_flit": pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    "crc_data": pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
}

TOPOLOGY_LEVELS = {
    pynvml.NVML_TOPOLOGY_INTERNAL: "INTERNAL",
    pynvml.NVML_TOPOLOGY_SINGLE: "SINGLE",
    pynvml.NVML_TOPOLOGY_MULTIPLE: "MULTIPLE",
    pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "HOSTBRIDGE",
    pynvml.NVML_TOPOLOGY_NODE: "NODE",
    pynvml.NVML_TOPOLOGY_SYSTEM: "SYSTEM",
}

# Backend method -> the NVML function it stands for. Snapshot `errors` are keyed by these names,
# and the error policy logs missing functions by them.
NVML_FUNCTION = {
    "driver_version": "nvmlSystemGetDriverVersion",
    "cuda_driver_version": "nvmlSystemGetCudaDriverVersion",
    "device_count": "nvmlDeviceGetCount",
    "name": "nvmlDeviceGetName",
    "uuid": "nvmlDeviceGetUUID",
    "pci_bus_id": "nvmlDeviceGetPciInfo",
    "numa_node": "nvmlDeviceGetNumaNodeId",
    "cpu_affinity": "nvmlDeviceGetCpuAffinity",
    "memory_info": "nvmlDeviceGetMemoryInfo",
    "utilization": "nvmlDeviceGetUtilizationRates",
    "clock_mhz": "nvmlDeviceGetClockInfo",
    "throttle_reasons": "nvmlDeviceGetCurrentClocksThrottleReasons",
    "pcie_gen": "nvmlDeviceGetCurrPcieLinkGeneration",
    "pcie_gen_max": "nvmlDeviceGetMaxPcieLinkGeneration",
    "pcie_width": "nvmlDeviceGetCurrPcieLinkWidth",
    "pcie_width_max": "nvmlDeviceGetMaxPcieLinkWidth",
    "pcie_throughput_kBps": "nvmlDeviceGetPcieThroughput",
    "pcie_replay_counter": "nvmlDeviceGetPcieReplayCounter",
    "nvlink_ids": "nvmlDeviceGetNvLinkState",
    "nvlink_active": "nvmlDeviceGetNvLinkState",
    "nvlink_version": "nvmlDeviceGetNvLinkVersion",
    "nvlink_remote": "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvlink_error_counter": "nvmlDeviceGetNvLinkErrorCounter",
    "field_values": "nvmlDeviceGetFieldValues",
    "common_ancestor": "nvmlDeviceGetTopologyCommonAncestor",
    "power_mw": "nvmlDeviceGetPowerUsage",
    "temperature_c": "nvmlDeviceGetTemperature",
}

FieldValue: TypeAlias = int | float | pynvml.NVMLError


class NvmlBackend(Protocol):
    """What the probes ask of NVML. Every method may raise a pynvml.NVMLError subclass."""

    live: bool  # True when a driver answers (the recorder then really waits between ticks)
    source: str  # for messages: "NVIDIA driver" or the snapshot path

    # a new sampling tick starts (the snapshot advances its series)
    def begin_tick(self) -> None: ...
    def timestamp(self) -> float: ...  # monotonic seconds of the current tick
    def close(self) -> None: ...

    def driver_version(self) -> str: ...
    def cuda_driver_version(self) -> int: ...
    def device_count(self) -> int: ...

    def name(self, i: int) -> str: ...
    def uuid(self, i: int) -> str: ...
    def pci_bus_id(self, i: int) -> str: ...
    def numa_node(self, i: int) -> int: ...
    def cpu_affinity(self, i: int) -> str: ...  # cpulist, e.g. "48-63,176-191"
    def memory_info(self, i: int) -> tuple[int, int]: ...  # (total, used) bytes
    def utilization(self, i: int) -> tuple[int, int]: ...  # (gpu, memory) percent
    def clock_mhz(self, i: int, which: str) -> int: ...  # which: "sm" | "mem"
    def throttle_reasons(self, i: int) -> int: ...  # bitmask
    def power_mw(self, i: int) -> int: ...
    def temperature_c(self, i: int) -> int: ...

    def pcie_gen(self, i: int) -> int: ...
    def pcie_gen_max(self, i: int) -> int: ...
    def pcie_width(self, i: int) -> int: ...
    def pcie_width_max(self, i: int) -> int: ...
    def pcie_throughput_kBps(self, i: int, direction: str) -> int: ...  # direction: "tx" | "rx"
    def pcie_replay_counter(self, i: int) -> int: ...

    def nvlink_ids(self, i: int) -> list[int]: ...  # the links this device has (active or not)
    def nvlink_active(self, i: int, link: int) -> bool: ...
    def nvlink_version(self, i: int, link: int) -> int: ...
    def nvlink_remote(self, i: int, link: int) -> str: ...  # "switch" or the peer's PCI bus id
    # NVLINK_ERROR_COUNTERS
    def nvlink_error_counter(self, i: int, link: int, counter: str) -> int: ...
    # Like nvmlDeviceGetFieldValues: one answer per (field id, scope); a failed value is an
    # NVMLError.
    def field_values(self, i: int, fields: list[tuple[int, int]]) -> list[FieldValue]: ...

    def common_ancestor(self, i: int, j: int) -> str: ...  # a TOPOLOGY_LEVELS name


def error_name(exc: pynvml.NVMLError) -> str:
    """The spelling snapshot files use: "NotSupported" for pynvml.NVMLError_NotSupported."""
    name = type(exc).__name__
    return name.removeprefix("NVMLError_") if name != "NVMLError" else f"Code{exc.value}"


def error_class(name: str) -> type[pynvml.NVMLError] | None:
    """The pynvml exception class for a snapshot error name, or None if pynvml has no such error."""
    cls = getattr(pynvml, f"NVMLError_{name}", None)
    return cls if isinstance(cls, type) and issubclass(cls, pynvml.NVMLError) else None


def normalise_bus_id(bus_id: str) -> str:
    """NVML spells the domain with 8 digits, sysfs with 4: compare on "0000:07:00.0" upper-cased
    hex."""
    bus_id = bus_id.strip().upper()
    domain, sep, rest = bus_id.partition(":")
    if sep and len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}{sep}{rest}"
