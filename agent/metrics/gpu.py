"""Per-GPU metrics: utilisation, memory, clocks, throttle reasons, power, temperature, lost GPUs.

Every per-GPU series carries the labels gpu, uuid, pci_bus_id, model_name, hostname.
"""

from __future__ import annotations

from stagelens import catalogue as c
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
        out.add(c.GPU_INFO, 1, **labels)
        out.add(c.GPU_LOST, g.lost, **labels)
        if g.lost:
            continue
        out.add(c.GPU_UTILIZATION, g.utilization_gpu_ratio, **labels)
        out.add(c.GPU_MEMORY_UTILIZATION, g.utilization_memory_ratio, **labels)
        out.add(c.GPU_MEMORY_USED, g.memory_used_bytes, **labels)
        out.add(c.GPU_MEMORY_TOTAL, g.memory_total_bytes, **labels)
        for clock, mhz in (("sm", g.clock_sm_mhz), ("mem", g.clock_mem_mhz)):
            out.add(c.GPU_CLOCK, None if mhz is None else mhz * _MHZ, clock=clock, **labels)
        reasons = g.throttle_reasons
        if reasons is not None:
            names = list(THROTTLE_REASONS.values()) + [r for r in reasons if r not in THROTTLE_REASONS.values()]
            for name in names:
                out.add(c.GPU_THROTTLE_REASON, int(name in reasons), reason=name, **labels)
        out.add(c.GPU_POWER, g.power_watts, **labels)
        out.add(c.GPU_TEMPERATURE, g.temperature_celsius, **labels)
