"""Per-GPU metrics: utilisation, memory, clocks, throttle reasons, power, temperature, lost GPUs.

Every per-GPU series carries the labels gpu, uuid, pci_bus_id, model_name, hostname.
"""

from __future__ import annotations

from stagelens.metrics.families import Scrape
from stagelens.probes.gpu import THROTTLE_REASONS, GpuSample

_MHZ = 1e6


def gpu_labels(gpu: GpuSample, hostname: str) -> dict:
    return {"gpu": str(gpu.index), "uuid": gpu.uuid or "", "pci_bus_id": gpu.pci_bus_id or "",
            "model_name": gpu.name or "", "hostname": hostname}


def hostname_of(frame) -> str:
    return (frame.node_sample.hostname if frame.node_sample is not None else None) or frame.node


def collect(out: Scrape, frame, _diagnosis) -> None:
    if not frame or frame.node_sample is None:
        return
    host = hostname_of(frame)
    for g in frame.node_sample.gpus:
        labels = gpu_labels(g, host)
        out.gauge("stagelens_gpu_info", "1 for each GPU, with its identity labels (join per-link series on gpu).", 1,
                  **labels)
        out.flag("stagelens_gpu_lost", "1 when NVML reports the GPU lost (fallen off the bus).", g.lost,
                 **labels)
        if g.lost:
            continue
        out.gauge("stagelens_gpu_utilization_ratio", "Share of time a kernel ran on the GPU (NVML).",
                  g.utilization_gpu_ratio, **labels)
        out.gauge("stagelens_gpu_memory_utilization_ratio", "Share of time device memory was read or written (NVML).",
                  g.utilization_memory_ratio, **labels)
        out.gauge("stagelens_gpu_memory_used_bytes", "Device memory in use.", g.memory_used_bytes, **labels)
        out.gauge("stagelens_gpu_memory_total_bytes", "Device memory in all.", g.memory_total_bytes, **labels)
        for clock, mhz in (("sm", g.clock_sm_mhz), ("mem", g.clock_mem_mhz)):
            out.gauge("stagelens_gpu_clock_hertz", "Current clock of the SM or memory domain.",
                      None if mhz is None else mhz * _MHZ, clock=clock, **labels)
        reasons = g.throttle_reasons
        if reasons is not None:
            names = list(THROTTLE_REASONS.values()) + [r for r in reasons if r not in THROTTLE_REASONS.values()]
            for name in names:
                out.gauge("stagelens_gpu_throttle_reason", "1 while the clocks are held down for this reason.",
                          int(name in reasons), reason=name, **labels)
        out.gauge("stagelens_gpu_power_watts", "Power draw.", g.power_watts, **labels)
        out.gauge("stagelens_gpu_temperature_celsius", "GPU core temperature.", g.temperature_celsius, **labels)
