"""Per-link metrics: each GPU's PCIe link (negotiated vs maximum, throughput, replays) and each NVLink."""

from __future__ import annotations

from agent.metrics.families import Scrape
from agent.metrics.gpu import gpu_labels, hostname_of


def collect(out: Scrape, frame, _diagnosis) -> None:
    if not frame or not frame.node_sample:
        return
    host = hostname_of(frame)
    for g in frame.node_sample.get("gpus", []):
        if g.get("lost"):
            continue
        labels = gpu_labels(g, host)
        if g.get("pcie"):
            _pcie(out, g["pcie"], labels)
        for link in g.get("nvlinks") or []:
            _nvlink(out, link, labels)


def _pcie(out: Scrape, p: dict, labels: dict) -> None:
    out.gauge("stagelens_pcie_link_generation", "Negotiated PCIe generation.", p.get("gen"), **labels)
    out.gauge("stagelens_pcie_link_max_generation", "Highest PCIe generation the link supports.", p.get("gen_max"),
              **labels)
    out.gauge("stagelens_pcie_link_width_lanes", "Negotiated PCIe width.", p.get("width"), **labels)
    out.gauge("stagelens_pcie_link_max_width_lanes", "Widest PCIe width the link supports.", p.get("width_max"),
              **labels)
    out.flag("stagelens_pcie_link_below_max", "1 when the link runs below its maximum generation or width.",
             p.get("below_max"), **labels)
    out.gauge("stagelens_pcie_link_bandwidth_bytes_per_second",
              "Bandwidth per direction at the negotiated generation and width.", p.get("bandwidth_bytes_per_second"),
              **labels)
    for direction in ("tx", "rx"):
        out.gauge("stagelens_pcie_throughput_bytes_per_second", "PCIe throughput per direction (NVML, ~20 ms window).",
                  p.get(f"{direction}_bytes_per_second"), direction=direction, **labels)
        out.gauge("stagelens_pcie_utilization_ratio", "PCIe throughput / the link's bandwidth, per direction.",
                  p.get(f"{direction}_util_ratio"), direction=direction, **labels)
    out.counter("stagelens_pcie_replays_total", "PCIe replays (link-level retransmissions) since the driver loaded.",
                p.get("replay_counter"), **labels)
    out.gauge("stagelens_pcie_replay_increments", "PCIe replays since the previous sample.",
              p.get("replay_increments"), **labels)


def _nvlink(out: Scrape, link: dict, labels: dict) -> None:
    remote = link.get("remote")
    if link.get("remote_gpu") is not None:
        remote = str(link["remote_gpu"])
    # gpu, link, remote only: 12 links a GPU make these the bulk of a scrape; join stagelens_gpu_info on gpu
    link_labels = {"gpu": labels["gpu"], "link": str(link["link"]), "remote": remote or "unknown"}
    out.flag("stagelens_nvlink_up", "1 when the NVLink is active; remote is 'switch' (NVSwitch) or the peer GPU.",
             link.get("active"), **link_labels)
    out.gauge("stagelens_nvlink_bandwidth_bytes_per_second", "NVLink bandwidth per direction.",
              link.get("bandwidth_bytes_per_second"), **link_labels)
    for direction in ("tx", "rx"):
        out.gauge("stagelens_nvlink_throughput_bytes_per_second", "NVLink throughput per direction.",
                  link.get(f"{direction}_bytes_per_second"), direction=direction, **link_labels)
        out.gauge("stagelens_nvlink_utilization_ratio", "NVLink throughput / its bandwidth, per direction.",
                  link.get(f"{direction}_util_ratio"), direction=direction, **link_labels)
    for counter, value in sorted((link.get("errors") or {}).items()):
        out.counter("stagelens_nvlink_errors_total", "NVLink error counters (replay, recovery, CRC) per link.",
                    value, counter=counter, **link_labels)
