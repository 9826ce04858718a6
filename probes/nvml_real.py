"""The NVML backend over the NVIDIA driver, through pynvml (nvidia-ml-py)."""

from __future__ import annotations

import threading
import time

import pynvml

from stagelens.probes.nvml_backend import (
    NVLINK_ERROR_COUNTERS,
    TOPOLOGY_LEVELS,
    FieldValue,
    normalise_bus_id,
)

_CLOCKS = {"sm": pynvml.NVML_CLOCK_SM, "mem": pynvml.NVML_CLOCK_MEM}
_PCIE_COUNTERS = {"tx": pynvml.NVML_PCIE_UTIL_TX_BYTES, "rx": pynvml.NVML_PCIE_UTIL_RX_BYTES}
_CPUSET_WORDS = 16  # 64-bit words of the affinity mask: up to 1024 CPUs
_FIELD_READERS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: lambda v: v.dVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: lambda v: v.uiVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: lambda v: v.ulVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: lambda v: v.ullVal,
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: lambda v: v.sllVal,
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: lambda v: v.siVal,
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: lambda v: v.usVal,
}


def cpulist(words: list[int]) -> str:
    """An affinity bitmask (64-bit words, lowest CPUs first) as a cpulist: "48-63,176-191"."""
    cpus = [w * 64 + b for w, word in enumerate(words) for b in range(64) if word >> b & 1]
    ranges: list[list[int]] = []
    for cpu in cpus:
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def _decode(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RealBackend:
    """Asks the driver. nvmlInit happens on first use, so constructing this never fails."""

    live = True
    source = "NVIDIA driver"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._initialised = False
        self._handles: dict[int, object] = {}
        self._tick_time = time.monotonic()

    # -- lifecycle ---------------------------------------------------------------------------
    def _init(self) -> None:
        if not self._initialised:
            with self._lock:
                if not self._initialised:
                    pynvml.nvmlInit()  # LibraryNotFound / DriverNotLoaded on a driverless node
                    self._initialised = True

    def _h(self, i: int) -> object:
        self._init()
        handle = self._handles.get(i)
        if handle is None:
            handle = self._handles[i] = pynvml.nvmlDeviceGetHandleByIndex(i)
        return handle

    def begin_tick(self) -> None:
        self._tick_time = time.monotonic()

    def timestamp(self) -> float:
        return self._tick_time

    def close(self) -> None:
        if self._initialised:
            self._initialised = False
            self._handles.clear()
            pynvml.nvmlShutdown()

    # -- system ------------------------------------------------------------------------------
    def driver_version(self) -> str:
        self._init()
        return _decode(pynvml.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int:
        self._init()
        return int(pynvml.nvmlSystemGetCudaDriverVersion())

    def device_count(self) -> int:
        self._init()
        return int(pynvml.nvmlDeviceGetCount())

    # -- device ------------------------------------------------------------------------------
    def name(self, i: int) -> str:
        return _decode(pynvml.nvmlDeviceGetName(self._h(i)))

    def uuid(self, i: int) -> str:
        return _decode(pynvml.nvmlDeviceGetUUID(self._h(i)))

    def pci_bus_id(self, i: int) -> str:
        return _decode(pynvml.nvmlDeviceGetPciInfo(self._h(i)).busId)

    def numa_node(self, i: int) -> int:
        try:
            return int(pynvml.nvmlDeviceGetNumaNodeId(self._h(i)))
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            # Older drivers: the kernel knows the device's node; -1 means none.
            path = f"/sys/bus/pci/devices/{normalise_bus_id(self.pci_bus_id(i)).lower()}/numa_node"
            try:
                with open(path) as f:
                    node = int(f.read().strip())
            except (OSError, ValueError):
                raise pynvml.NVMLError_NotSupported() from None
            if node < 0:
                raise pynvml.NVMLError_NotSupported() from None
            return node

    def cpu_affinity(self, i: int) -> str:
        words = pynvml.nvmlDeviceGetCpuAffinity(self._h(i), _CPUSET_WORDS)
        return cpulist([int(w) for w in words])

    def memory_info(self, i: int) -> tuple[int, int]:
        info = pynvml.nvmlDeviceGetMemoryInfo(self._h(i))
        return int(info.total), int(info.used)

    def utilization(self, i: int) -> tuple[int, int]:
        rates = pynvml.nvmlDeviceGetUtilizationRates(self._h(i))
        return int(rates.gpu), int(rates.memory)

    def clock_mhz(self, i: int, which: str) -> int:
        return int(pynvml.nvmlDeviceGetClockInfo(self._h(i), _CLOCKS[which]))

    def throttle_reasons(self, i: int) -> int:
        handle = self._h(i)
        try:
            return int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        except pynvml.NVMLError_FunctionNotFound:  # drivers before the 535 rename
            return int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

    def power_mw(self, i: int) -> int:
        return int(pynvml.nvmlDeviceGetPowerUsage(self._h(i)))

    def temperature_c(self, i: int) -> int:
        return int(pynvml.nvmlDeviceGetTemperature(self._h(i), pynvml.NVML_TEMPERATURE_GPU))

    # -- PCIe --------------------------------------------------------------------------------
    def pcie_gen(self, i: int) -> int:
        return int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(self._h(i)))

    def pcie_gen_max(self, i: int) -> int:
        return int(pynvml.nvmlDeviceGetMaxPcieLinkGeneration(self._h(i)))

    def pcie_width(self, i: int) -> int:
        return int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(self._h(i)))

    def pcie_width_max(self, i: int) -> int:
        return int(pynvml.nvmlDeviceGetMaxPcieLinkWidth(self._h(i)))

    def pcie_throughput_kBps(self, i: int, direction: str) -> int:
        return int(pynvml.nvmlDeviceGetPcieThroughput(self._h(i), _PCIE_COUNTERS[direction]))

    def pcie_replay_counter(self, i: int) -> int:
        return int(pynvml.nvmlDeviceGetPcieReplayCounter(self._h(i)))

    # -- NVLink ------------------------------------------------------------------------------
    def nvlink_ids(self, i: int) -> list[int]:
        handle = self._h(i)
        links: list[int] = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                pynvml.nvmlDeviceGetNvLinkState(handle, link)
            except (pynvml.NVMLError_InvalidArgument, pynvml.NVMLError_NotSupported):
                if not links:  # no NVLink on this device at all: absent, like any unsupported value
                    raise pynvml.NVMLError_NotSupported() from None
                break  # past this device's last link
            links.append(link)
        return links

    def nvlink_active(self, i: int, link: int) -> bool:
        return bool(pynvml.nvmlDeviceGetNvLinkState(self._h(i), link))

    def nvlink_version(self, i: int, link: int) -> int:
        return int(pynvml.nvmlDeviceGetNvLinkVersion(self._h(i), link))

    def nvlink_remote(self, i: int, link: int) -> str:
        handle = self._h(i)
        try:
            kind = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except pynvml.NVMLError_FunctionNotFound:
            kind = None  # old driver: fall back to the remote bus id alone
        if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
            return "switch"
        return _decode(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)

    def nvlink_error_counter(self, i: int, link: int, counter: str) -> int:
        return int(pynvml.nvmlDeviceGetNvLinkErrorCounter(self._h(i), link,
                                                          NVLINK_ERROR_COUNTERS[counter]))

    def field_values(self, i: int, fields: list[tuple[int, int]]) -> list[FieldValue]:
        raw = pynvml.nvmlDeviceGetFieldValues(self._h(i), fields)
        out: list[FieldValue] = []
        for v in raw:
            # The call can succeed while single values fail: each carries its own nvmlReturn.
            if v.nvmlReturn != pynvml.NVML_SUCCESS:
                out.append(pynvml.NVMLError(v.nvmlReturn))
                continue
            reader = _FIELD_READERS.get(v.valueType)
            out.append(reader(v.value) if reader else pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN))
        return out

    # -- topology ----------------------------------------------------------------------------
    def common_ancestor(self, i: int, j: int) -> str:
        level = pynvml.nvmlDeviceGetTopologyCommonAncestor(self._h(i), self._h(j))
        return TOPOLOGY_LEVELS.get(level, "SYSTEM")
