"""The GPU topology matrix of `nvidia-smi topo -m`, with CPU/NUMA affinity and the link table.

Matrix rule (docs/design.md, "NVML snapshot format"): NV# = active links from one GPU whose remote
is the other; when both reach the NVSwitch fabric, NV# = the smaller count of their active switch
links; otherwise the PCIe level of their common ancestor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from stagelens.probes.device import DeviceInfo, read_device_info
from stagelens.probes.links import pcie_bandwidth_bytes, pcie_findings
from stagelens.probes.nvml_backend import NvmlBackend, normalise_bus_id
from stagelens.probes.nvml_reader import DeviceLost, NvmlReader

PCIE_CELL = {"INTERNAL": "PIX", "SINGLE": "PIX", "MULTIPLE": "PXB", "HOSTBRIDGE": "PHB",
             "NODE": "NODE", "SYSTEM": "SYS"}
UNKNOWN = "N/A"  # a lost GPU, or a pair NVML would not place

LEGEND = """Legend:

  X     the GPU itself
  NV#   joined by # bonded NVLinks (directly, or both on the NVSwitch fabric)
  PIX   PCIe, through at most one PCIe bridge
  PXB   PCIe, through several PCIe bridges but no host bridge
  PHB   PCIe, through a PCIe host bridge (the CPU)
  NODE  PCIe, across host bridges within one NUMA node
  SYS   PCIe plus the link between NUMA nodes (QPI/UPI/Infinity Fabric)
  N/A   unknown: a lost GPU, or a pair NVML would not place"""


@dataclass
class Topology:
    gpus: list[str]
    matrix: list[list[str]]
    cpu_affinity: list[str | None]
    numa_affinity: list[int | None]
    links: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        """The `topo --json` document. Built once and shared by every sample: treat it as
        read-only."""
        cached = self.__dict__.get("_dict")
        if cached is None:
            cached = self.__dict__["_dict"] = asdict(self)
        return cached


def matrix_cell(a: DeviceInfo, b: DeviceInfo, ancestor: str | None) -> str:
    if a.index == b.index:
        return "X"
    if a.lost or b.lost:
        return UNKNOWN
    # Count from both ends: one side's NVLink answers may be missing.
    direct = max(a.active_links_to(b.pci_bus_id), b.active_links_to(a.pci_bus_id))
    if direct:
        return f"NV{direct}"
    switch = min(a.active_switch_links(), b.active_switch_links())
    if switch:
        return f"NV{switch}"
    return PCIE_CELL.get(ancestor or "", UNKNOWN)


def needs_ancestor(a: DeviceInfo, b: DeviceInfo) -> bool:
    return matrix_cell(a, b, None) == UNKNOWN and not (a.lost or b.lost)


def build_matrix(infos: list[DeviceInfo], ancestors: dict[tuple[int, int], str | None]) -> list[list[str]]:
    """The matrix from static device facts and the PCIe common-ancestor level of each pair (i <
    j)."""
    return [
        [matrix_cell(a, b, ancestors.get((min(a.index, b.index), max(a.index, b.index)))) for b in infos]
        for a in infos
    ]


def read_ancestors(reader: NvmlReader, infos: list[DeviceInfo]) -> dict[tuple[int, int], str | None]:
    """Only the pairs NVLink does not already decide: each call walks the PCIe tree in the
    driver."""
    out: dict[tuple[int, int], str | None] = {}
    for a in infos:
        for b in infos[a.index + 1 :]:
            if needs_ancestor(a, b):
                try:
                    out[(a.index, b.index)] = reader.get("common_ancestor", a.index, b.index)
                except DeviceLost:
                    out[(a.index, b.index)] = None
    return out


def link_table(infos: list[DeviceInfo], pcie: dict[int, tuple]) -> list[dict[str, Any]]:
    """One row per PCIe link and per NVLink; static facts only, so replays compare equal."""
    by_bus = {normalise_bus_id(d.pci_bus_id): d.label for d in infos if d.pci_bus_id}
    rows: list[dict[str, Any]] = []
    for d in infos:
        if d.lost:
            continue
        gen, gen_max, width, width_max = pcie.get(d.index, (None,) * 4)
        bandwidth = pcie_bandwidth_bytes(gen, width)
        findings = pcie_findings(d.label, gen, gen_max, width, width_max)
        rows.append({"gpu": d.label, "type": "PCIe", "gen": gen, "gen_max": gen_max, "width": width,
                     "width_max": width_max,
                     "bandwidth_GBps": None if bandwidth is None else round(bandwidth / 1e9, 3),
                     "finding": "; ".join(findings) or None})
        for link in d.nvlinks:
            remote = link.remote
            peer = by_bus.get(normalise_bus_id(remote)) if remote is not None and remote != "switch" else None
            rows.append({"gpu": d.label, "type": "NVLink", "link": link.link, "active": link.active,
                         "version": link.version, "remote": link.remote, "remote_gpu": peer})
    return rows


def read_pcie_links(reader: NvmlReader, infos: list[DeviceInfo]) -> dict[int, tuple]:
    out: dict[int, tuple] = {}
    for d in infos:
        if d.lost:
            continue
        try:
            out[d.index] = tuple(reader.get(m, d.index) for m in ("pcie_gen", "pcie_gen_max", "pcie_width",
                                                                   "pcie_width_max"))
        except DeviceLost:
            d.lost = True
    return out


def build_topology(reader: NvmlReader, infos: list[DeviceInfo]) -> Topology:
    pcie = read_pcie_links(reader, infos)
    return Topology(
        gpus=[d.label for d in infos],
        matrix=build_matrix(infos, read_ancestors(reader, infos)),
        cpu_affinity=[d.cpu_affinity for d in infos],
        numa_affinity=[d.numa_node for d in infos],
        links=link_table(infos, pcie),
    )


def collect_topology(backend: NvmlBackend) -> Topology:
    """Read the topology straight from a backend. Raises NoDriverError on a node without a
    driver."""
    reader = NvmlReader(backend)
    backend.begin_tick()
    count = reader.get("device_count") or 0
    return build_topology(reader, [read_device_info(reader, i) for i in range(count)])


def topology_json(backend: NvmlBackend) -> dict[str, Any]:
    """The `topo --json` document (docs/design.md)."""
    return collect_topology(backend).to_dict()


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def render_topology_text(topo: dict[str, Any]) -> str:
    """`nvidia-smi topo -m` as text, from the `topo --json` dict, then the link table."""
    gpus = topo["gpus"]
    if not gpus:
        return "No GPUs found.\n"
    header = ["", *gpus, "CPU Affinity", "NUMA Affinity"]
    rows = [header]
    for n, gpu in enumerate(gpus):
        numa = topo["numa_affinity"][n]
        rows.append([gpu, *topo["matrix"][n], topo["cpu_affinity"][n] or UNKNOWN,
                     UNKNOWN if numa is None else str(numa)])
    lines = [*_table(rows), "", LEGEND, "", *render_links(topo["links"])]
    return "\n".join(lines) + "\n"


def render_links(links: list[dict[str, Any]]) -> list[str]:
    def num(v: Any) -> str:
        return "?" if v is None else str(v)

    rows = [["GPU", "PCIe now", "PCIe max", "GB/s/dir", "NVLinks active", "NVLink remotes"]]
    findings: list[str] = []
    for row in (r for r in links if r["type"] == "PCIe"):
        nv = [r for r in links if r["type"] == "NVLink" and r["gpu"] == row["gpu"]]
        active = [r for r in nv if r["active"]]
        remotes: dict[str, int] = {}
        for r in active:
            key = r["remote_gpu"] or ("NVSwitch" if r["remote"] == "switch" else r["remote"] or "?")
            remotes[key] = remotes.get(key, 0) + 1
        versions = {r["version"] for r in active} - {None}
        nvlinks = f"{len(active)}/{len(nv)}" + (f" (v{versions.pop()})" if len(versions) == 1 else "")
        rows.append([
            row["gpu"],
            f"Gen{num(row['gen'])} x{num(row['width'])}",
            f"Gen{num(row['gen_max'])} x{num(row['width_max'])}",
            num(row["bandwidth_GBps"]),
            nvlinks,
            ", ".join(f"{k} x{v}" for k, v in remotes.items()) or "-",
        ])
        if row["finding"]:
            findings.append(row["finding"])
    out = ["Links:", "", *_table(rows)]
    if findings:
        out += ["", "Findings:", *(f"  - {f}" for f in findings)]
    return out
