"""PCIe and NVLink state per GPU: negotiated vs maximum link, throughput and utilisation, error
counters.

Rates that NVML only gives as cumulative counters (NVLink KiB, replay and error counts) are taken
as deltas between ticks, so `LinkState` keeps the previous tick's counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml

from stagelens.probes.device import DeviceInfo
from stagelens.probes.nvml_backend import FI_NVLINK_RX_KIB, FI_NVLINK_TX_KIB, NVLINK_ERROR_COUNTERS, normalise_bus_id
from stagelens.probes.nvml_reader import NvmlReader

# Usable GB/s per lane and direction, after line encoding (8b/10b up to Gen2, 128b/130b from Gen3).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# GB/s per link and direction by NVLink version (NVLink 3 and 4: 25 GB/s, e.g. A100 12 x 25 = 300
# GB/s).
NVLINK_LINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}


def pcie_bandwidth_bytes(gen: int | None, width: int | None) -> float | None:
    """Bytes/s per direction of a PCIe link at this generation and width."""
    if gen not in PCIE_LANE_GBPS or not width:
        return None
    return PCIE_LANE_GBPS[gen] * width * 1e9


@dataclass(slots=True)
class PcieSample:
    gen: int | None = None
    gen_max: int | None = None
    width: int | None = None
    width_max: int | None = None
    bandwidth_bytes_per_second: float | None = None  # per direction, at the current gen x width
    tx_bytes_per_second: float | None = None
    rx_bytes_per_second: float | None = None
    tx_util_ratio: float | None = None
    rx_util_ratio: float | None = None
    replay_counter: int | None = None
    replay_increments: int | None = None  # since the previous tick; None on the first
    below_max: bool | None = None
    findings: list[str] = field(default_factory=list)


@dataclass(slots=True)
class NvlinkSample:
    link: int
    active: bool
    version: int | None = None
    remote: str | None = None
    remote_gpu: int | None = None
    bandwidth_bytes_per_second: float | None = None  # per direction
    tx_bytes_per_second: float | None = None
    rx_bytes_per_second: float | None = None
    tx_util_ratio: float | None = None
    rx_util_ratio: float | None = None
    # counter -> cumulative count, where supported
    errors: dict[str, int] = field(default_factory=dict)
    # since the previous read of the counters
    error_increments: dict[str, int] = field(default_factory=dict)


def pcie_findings(label: str, gen, gen_max, width, width_max) -> list[str]:
    """A link negotiated below its maximum is worth saying, with what it costs and what to check."""
    out: list[str] = []
    if gen is not None and gen_max is not None and gen < gen_max:
        now, best = pcie_bandwidth_bytes(gen, width), pcie_bandwidth_bytes(gen_max, width)
        cost = f" ({now / 1e9:.1f} of {best / 1e9:.1f} GB/s per direction)" if now and best else ""
        out.append(
            f"{label} PCIe link runs at Gen{gen}, below its maximum Gen{gen_max}{cost}; "
            "idle GPUs lower the generation to save power, so recheck under load"
        )
    if width is not None and width_max is not None and width < width_max:
        out.append(
            f"{label} PCIe link is x{width}, narrower than its maximum x{width_max}; "
            "check the slot, riser and BIOS bifurcation settings"
        )
    return out


def _ratio(rate: float | None, bandwidth: float | None) -> float | None:
    return None if rate is None or not bandwidth else rate / bandwidth


def _delta(now: int | None, before: int | None) -> int | None:
    # A counter that went backwards was reset (driver reload, GPU reset): no delta this tick.
    return None if now is None or before is None or now < before else now - before


class LinkState:
    """Counters of the previous tick, to turn cumulative counters into rates and increments.

    NVLink error counters are one NVML call per link and counter (384 a tick on a DGX A100) and
    rarely move, so they are read every `errors_every` ticks; between reads the last values stand.
    """

    def __init__(self, errors_every: int = 10) -> None:
        self.errors_every = max(1, errors_every)
        self.ticks = 0
        self.replay: dict[int, int] = {}
        self.nvlink: dict[tuple[int, int], tuple[float, int | None, int | None]] = {}
        self.nvlink_errors: dict[tuple[int, int, str], int] = {}
        self.no_error_counters: set[int] = set()  # devices that said NotSupported: stop asking

    def begin_tick(self) -> None:
        self.ticks += 1

    def sample_pcie(self, reader: NvmlReader, info: DeviceInfo) -> PcieSample:
        i = info.index
        gen, gen_max = reader.get("pcie_gen", i), reader.get("pcie_gen_max", i)
        width, width_max = reader.get("pcie_width", i), reader.get("pcie_width_max", i)
        s = PcieSample(gen=gen, gen_max=gen_max, width=width, width_max=width_max)
        s.bandwidth_bytes_per_second = pcie_bandwidth_bytes(gen, width)
        known = None not in (gen, gen_max, width, width_max)
        s.below_max = (gen < gen_max or width < width_max) if known else None
        s.findings = pcie_findings(info.label, gen, gen_max, width, width_max)
        # NVML answers PCIe throughput in KB/s (1 KB = 1000 bytes) over its last ~20 ms window.
        tx, rx = reader.get("pcie_throughput_kBps", i, "tx"), reader.get("pcie_throughput_kBps", i, "rx")
        s.tx_bytes_per_second = None if tx is None else tx * 1000.0
        s.rx_bytes_per_second = None if rx is None else rx * 1000.0
        s.tx_util_ratio = _ratio(s.tx_bytes_per_second, s.bandwidth_bytes_per_second)
        s.rx_util_ratio = _ratio(s.rx_bytes_per_second, s.bandwidth_bytes_per_second)
        s.replay_counter = reader.get("pcie_replay_counter", i)
        s.replay_increments = _delta(s.replay_counter, self.replay.get(i))
        if s.replay_counter is not None:
            self.replay[i] = s.replay_counter
        if s.replay_increments:
            s.findings.append(
                f"{info.label} PCIe replay counter rose by {s.replay_increments}: the link retransmits; "
                "check seating, riser and cabling"
            )
        return s

    def sample_nvlinks(
        self, reader: NvmlReader, info: DeviceInfo, now: float, gpu_by_bus: dict[str, int]
    ) -> list[NvlinkSample]:
        i = info.index
        out: list[NvlinkSample] = []
        for link in info.nvlinks:
            remote = link.remote
            peer = gpu_by_bus.get(normalise_bus_id(remote)) if remote is not None and remote != "switch" else None
            bandwidth = NVLINK_LINK_GBPS.get(link.version or 0)
            out.append(
                NvlinkSample(
                    link=link.link,
                    active=link.active,
                    version=link.version,
                    remote=remote,
                    remote_gpu=peer,
                    bandwidth_bytes_per_second=None if bandwidth is None else bandwidth * 1e9,
                )
            )
        active = [s for s in out if s.active]
        if not active:
            return out
        self._rates(reader, i, active, now)
        if i in self.no_error_counters:
            return out
        if (self.ticks - 1) % self.errors_every == 0:
            self._errors(reader, i, active)
        else:
            for s in active:
                for counter in NVLINK_ERROR_COUNTERS:
                    value = self.nvlink_errors.get((i, s.link, counter))
                    if value is not None:
                        s.errors[counter] = value
        return out

    def _rates(self, reader: NvmlReader, i: int, active: list[NvlinkSample], now: float) -> None:
        fields = [(fid, s.link) for s in active for fid in (FI_NVLINK_TX_KIB, FI_NVLINK_RX_KIB)]
        values = reader.get("field_values", i, fields)
        if values is None:
            return
        for n, s in enumerate(active):
            tx, rx = values[2 * n], values[2 * n + 1]
            # Each value has its own nvmlReturn: a failed one is absent, the others still count.
            if isinstance(tx, pynvml.NVMLError):
                reader.handle(i, "field_values", tx)
                tx = None
            if isinstance(rx, pynvml.NVMLError):
                reader.handle(i, "field_values", rx)
                rx = None
            before = self.nvlink.get((i, s.link))
            self.nvlink[(i, s.link)] = (now, tx, rx)
            if before is None or now <= before[0]:
                continue
            dt = now - before[0]
            dtx, drx = _delta(tx, before[1]), _delta(rx, before[2])
            s.tx_bytes_per_second = None if dtx is None else dtx * 1024 / dt  # counters are KiB
            s.rx_bytes_per_second = None if drx is None else drx * 1024 / dt
            s.tx_util_ratio = _ratio(s.tx_bytes_per_second, s.bandwidth_bytes_per_second)
            s.rx_util_ratio = _ratio(s.rx_bytes_per_second, s.bandwidth_bytes_per_second)

    def _errors(self, reader: NvmlReader, i: int, active: list[NvlinkSample]) -> None:
        answered = False
        for s in active:
            for counter in NVLINK_ERROR_COUNTERS:
                value = reader.get("nvlink_error_counter", i, s.link, counter)
                if value is None:
                    continue
                answered = True
                s.errors[counter] = value
                key = (i, s.link, counter)
                inc = _delta(value, self.nvlink_errors.get(key))
                self.nvlink_errors[key] = value
                if inc is not None:
                    s.error_increments[counter] = inc
        if not answered and reader.errors.get(i, {}).get("nvmlDeviceGetNvLinkErrorCounter") == "NotSupported":
            self.no_error_counters.add(i)  # hundreds of calls a tick for nothing otherwise
