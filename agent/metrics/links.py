"""Per-link metrics: each GPU's PCIe link (negotiated vs maximum, throughput, replays) and each NVLink."""

from __future__ import annotations

from stagelens.metrics.families import Scrape
from stagelens.metrics.gpu import gpu_labels, hostname_of
from stagelens.probes.links import NvlinkSample, PcieSample


def collect(out: Scrape, frame, _diagnosis) -> None:
    if not frame or frame.node_sample is None:
        return
    host = hostname_of(frame)
    for g in frame.node_sample.gpus:
        if g.lost:
            continue
        labels = gpu_labels(g, host)
        if g.pcie is not None:
            _pcie(out, g.pcie, labels)
        for link in g.nvlinks:
            _nvlink(out, link, labels)


def _pcie(out: Scrape, p: PcieSample, labels: dict) -> None:
    out.gauge("stagelens_pcie_link_generation", "Negotiated PCIe generation.", p.gen, **labels)
    out.gauge("stagelens_pcie_link_max_generation", "Highest PCIe generation the link supports.", p.gen_max,
              **labels)
    out.gauge("stagelens_pcie_link_width_lanes", "Negotiated PCIe width.", p.width, **labels)
    out.gauge("stagelens_pcie_link_max_width_lanes", "Widest PCIe width the link supports.", p.width_max,
              **labels)
    out.flag("stagelens_pcie_link_below_max", "1 when the link runs below its maximum generation or width.",
             p.below_max, **labels)
    out.gauge("stagelens_pcie_link_bandwidth_bytes_per_second",
              "Bandwidth per direction at the negotiated generation and width.", p.bandwidth_bytes_per_second,
              **labels)
    for direction, rate, ratio in (("tx", p.tx_bytes_per_second, p.tx_util_ratio),
                                   ("rx", p.rx_bytes_per_second, p.rx_util_ratio)):
        out.gauge("stagelens_pcie_throughput_bytes_per_second", "PCIe throughput per direction (NVML, ~20 ms window).",
                  rate, direction=direction, **labels)
        out.gauge("stagelens_pcie_utilization_ratio", "PCIe throughput / the link's bandwidth, per direction.",
                  ratio, direction=direction, **labels)
    out.counter("stagelens_pcie_replays_total", "PCIe replays (link-level retransmissions) since the driver loaded.",
                p.replay_counter, **labels)
    out.gauge("stagelens_pcie_replay_increments", "PCIe replays since the previous sample.",
              p.replay_increments, **labels)


def _nvlink(out: Scrape, link: NvlinkSample, labels: dict) -> None:
    remote = link.remote
    if link.remote_gpu is not None:
        remote = str(link.remote_gpu)
    # gpu, link, remote only: 12 links a GPU make these the bulk of a scrape; join stagelens_gpu_info on gpu
    link_labels = {"gpu": labels["gpu"], "link": str(link.link), "remote": remote or "unknown"}
    out.flag("stagelens_nvlink_up", "1 when the NVLink is active; remote is 'switch' (NVSwitch) or the peer GPU.",
             link.active, **link_labels)
    out.gauge("stagelens_nvlink_bandwidth_bytes_per_second", "NVLink bandwidth per direction.",
              link.bandwidth_bytes_per_second, **link_labels)
    for direction, rate, ratio in (("tx", link.tx_bytes_per_second, link.tx_util_ratio),
                                   ("rx", link.rx_bytes_per_second, link.rx_util_ratio)):
        out.gauge("stagelens_nvlink_throughput_bytes_per_second", "NVLink throughput per direction.",
                  rate, direction=direction, **link_labels)
        out.gauge("stagelens_nvlink_utilization_ratio", "NVLink throughput / its bandwidth, per direction.",
                  ratio, direction=direction, **link_labels)
    for counter, value in sorted(link.errors.items()):
        out.counter("stagelens_nvlink_errors_total", "NVLink error counters (replay, recovery, CRC) per link.",
                    value, counter=counter, **link_labels)
