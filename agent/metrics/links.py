"""Per-link metrics: each GPU's PCIe link (negotiated vs maximum, throughput, replays) and each
NVLink."""

from __future__ import annotations

from stagelens import catalogue as c
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
    out.add(c.PCIE_GENERATION, p.gen, **labels)
    out.add(c.PCIE_MAX_GENERATION, p.gen_max, **labels)
    out.add(c.PCIE_WIDTH, p.width, **labels)
    out.add(c.PCIE_MAX_WIDTH, p.width_max, **labels)
    out.add(c.PCIE_BELOW_MAX, p.below_max, **labels)
    out.add(c.PCIE_BANDWIDTH, p.bandwidth_bytes_per_second, **labels)
    for direction, rate, ratio in (("tx", p.tx_bytes_per_second, p.tx_util_ratio),
                                   ("rx", p.rx_bytes_per_second, p.rx_util_ratio)):
        out.add(c.PCIE_THROUGHPUT, rate, direction=direction, **labels)
        out.add(c.PCIE_UTILIZATION, ratio, direction=direction, **labels)
    out.add(c.PCIE_REPLAYS, p.replay_counter, **labels)
    out.add(c.PCIE_REPLAY_INCREMENTS, p.replay_increments, **labels)


def _nvlink(out: Scrape, link: NvlinkSample, labels: dict) -> None:
    remote = link.remote
    if link.remote_gpu is not None:
        remote = str(link.remote_gpu)
    # gpu, link, remote only: 12 links a GPU make these the bulk of a scrape; join
    # stagelens_gpu_info on gpu
    link_labels = {"gpu": labels["gpu"], "link": str(link.link), "remote": remote or "unknown"}
    out.add(c.NVLINK_UP, link.active, **link_labels)
    out.add(c.NVLINK_BANDWIDTH, link.bandwidth_bytes_per_second, **link_labels)
    for direction, rate, ratio in (("tx", link.tx_bytes_per_second, link.tx_util_ratio),
                                   ("rx", link.rx_bytes_per_second, link.rx_util_ratio)):
        out.add(c.NVLINK_THROUGHPUT, rate, direction=direction, **link_labels)
        out.add(c.NVLINK_UTILIZATION, ratio, direction=direction, **link_labels)
    for counter, value in sorted(link.errors.items()):
        out.add(c.NVLINK_ERRORS, value, counter=counter, **link_labels)
