"""Per-GPU dynamic state: utilisation, memory, clocks, throttle reasons, power, temperature."""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml

from stagelens.probes.device import DeviceInfo
from stagelens.probes.links import NvlinkSample, PcieSample
from stagelens.probes.nvml_reader import NvmlReader

# Clock event ("throttle") reason bits, as NVML defines them, to readable names.
THROTTLE_REASONS = {
    pynvml.nvmlClocksThrottleReasonGpuIdle: "gpu_idle",
    pynvml.nvmlClocksThrottleReasonApplicationsClocksSetting: "applications_clocks_setting",
    pynvml.nvmlClocksThrottleReasonSwPowerCap: "sw_power_cap",
    pynvml.nvmlClocksThrottleReasonHwSlowdown: "hw_slowdown",
    pynvml.nvmlClocksThrottleReasonSyncBoost: "sync_boost",
    pynvml.nvmlClocksThrottleReasonSwThermalSlowdown: "sw_thermal_slowdown",
    pynvml.nvmlClocksThrottleReasonHwThermalSlowdown: "hw_thermal_slowdown",
    pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown: "hw_power_brake_slowdown",
    pynvml.nvmlClocksThrottleReasonDisplayClockSetting: "display_clock_setting",
    0x200: "board_limit",  # not named by every nvidia-ml-py release
    0x400: "reliability",
}


def decode_throttle_reasons(mask: int) -> list[str]:
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"other_0x{unknown:x}")  # a newer driver's reason we have no name for
    return names


@dataclass(slots=True)
class GpuSample:
    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    lost: bool = False
    utilization_gpu_ratio: float | None = None
    utilization_memory_ratio: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    clock_sm_mhz: int | None = None
    clock_mem_mhz: int | None = None
    throttle_reasons: list[str] | None = None
    power_watts: float | None = None
    temperature_celsius: int | None = None
    pcie: PcieSample | None = None  # filled by the links collector
    nvlinks: list[NvlinkSample] = field(default_factory=list)
    # NVML functions that answered NotSupported
    unsupported: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # NVML function -> error, other failures


def read_gpu(reader: NvmlReader, info: DeviceInfo) -> GpuSample:
    """One tick of GPU state. Raises DeviceLost if the GPU is lost in the middle of it."""
    i = info.index
    s = GpuSample(index=i, uuid=info.uuid, name=info.name, pci_bus_id=info.pci_bus_id,
                  lost=info.lost)
    if info.lost:
        return s
    util = reader.get("utilization", i)
    if util is not None:
        s.utilization_gpu_ratio, s.utilization_memory_ratio = util[0] / 100, util[1] / 100
    memory = reader.get("memory_info", i)
    if memory is not None:
        s.memory_total_bytes, s.memory_used_bytes = memory
    s.clock_sm_mhz = reader.get("clock_mhz", i, "sm")
    s.clock_mem_mhz = reader.get("clock_mhz", i, "mem")
    mask = reader.get("throttle_reasons", i)
    s.throttle_reasons = None if mask is None else decode_throttle_reasons(mask)
    power = reader.get("power_mw", i)
    s.power_watts = None if power is None else power / 1000
    s.temperature_celsius = reader.get("temperature_c", i)
    return s
