"""Static facts about each GPU (identity, placement, NVLink wiring), read once and cached by the
sampler."""

from __future__ import annotations

from dataclasses import dataclass, field

from stagelens.probes.nvml_backend import normalise_bus_id
from stagelens.probes.nvml_reader import DeviceLost, NvmlReader


@dataclass
class NvlinkInfo:
    link: int
    active: bool
    version: int | None
    remote: str | None  # "switch", the peer's PCI bus id, or None when NVML would not say


@dataclass
class DeviceInfo:
    index: int
    lost: bool = False
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None
    cpu_affinity: str | None = None
    memory_total_bytes: int | None = None
    nvlinks: list[NvlinkInfo] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"GPU{self.index}"

    def active_links_to(self, bus_id: str | None) -> int:
        if bus_id is None:
            return 0
        want = normalise_bus_id(bus_id)
        peers = (lk.remote for lk in self.nvlinks if lk.active and lk.remote is not None and lk.remote != "switch")
        return sum(1 for remote in peers if normalise_bus_id(remote) == want)

    def active_switch_links(self) -> int:
        return sum(1 for lk in self.nvlinks if lk.active and lk.remote == "switch")


def read_device_info(reader: NvmlReader, i: int) -> DeviceInfo:
    """Everything static about GPU i; a lost GPU comes back as `DeviceInfo(i, lost=True)`."""
    try:
        info = DeviceInfo(
            index=i,
            name=reader.get("name", i),
            uuid=reader.get("uuid", i),
            pci_bus_id=reader.get("pci_bus_id", i),
            numa_node=reader.get("numa_node", i),
            cpu_affinity=reader.get("cpu_affinity", i),
        )
        memory = reader.get("memory_info", i)
        info.memory_total_bytes = memory[0] if memory else None
        for link in reader.get("nvlink_ids", i) or []:
            info.nvlinks.append(
                NvlinkInfo(
                    link=link,
                    active=bool(reader.get("nvlink_active", i, link)),
                    version=reader.get("nvlink_version", i, link),
                    remote=reader.get("nvlink_remote", i, link),
                )
            )
        return info
    except DeviceLost:
        return DeviceInfo(index=i, lost=True)
