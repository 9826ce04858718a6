"""The sampler-facing API: one call, one typed node sample, JSON both ways (probes/sample_json.py).

Collectors ("nvml", "topology", "links", "host") each report their own success and duration, the
way node_exporter does, so one failing source never hides the others.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stagelens.probes.device import DeviceInfo, read_device_info
from stagelens.probes.errors import NoDriverError
from stagelens.probes.gpu import GpuSample, read_gpu
from stagelens.probes.host import HostProbe, HostSample
from stagelens.probes.links import LinkState
from stagelens.probes.nvml_backend import NvmlBackend, normalise_bus_id
from stagelens.probes.nvml_reader import DeviceLost, NvmlReader
from stagelens.probes.sample_json import NodeSampleError, plain_fields, read
from stagelens.probes.topology import Topology, build_topology

log = logging.getLogger(__name__)
SAMPLE_VERSION = 1
COLLECTORS = ("nvml", "topology", "links", "host")


@dataclass
class CollectorStatus:
    name: str
    success: bool
    duration_seconds: float
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "success": self.success,
                "duration_seconds": self.duration_seconds, "error": self.error}


@dataclass
class DriverStatus:
    state: str  # "ok" | "no_driver" | "error"
    source: str
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    message: str | None = None


@dataclass
class NodeSample:
    version: int
    hostname: str
    time_unix: float
    time_monotonic: float  # the backend's tick time: rates in this sample are over its deltas
    driver: DriverStatus
    gpus: list[GpuSample] = field(default_factory=list)
    topology: Topology | None = None
    host: HostSample | None = None
    collectors: list[CollectorStatus] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The sample's JSON, made once and shared by every frame serialiser (a DGX sample is
        ~100 values a GPU): treat a sample as read-only once the probe returned it."""
        cached = self.__dict__.get("_dict")
        if cached is None:
            cached = self.__dict__["_dict"] = plain_fields(self)
        return cached

    @classmethod
    def from_dict(cls, data: Any) -> NodeSample:
        """The sample of its JSON (a bundle, the HTTP API); NodeSampleError naming the field not
        as written."""
        sample = read(cls, data)
        if type(sample.version) is not int or sample.version != SAMPLE_VERSION:
            raise NodeSampleError(f"version: must be {SAMPLE_VERSION}, got {sample.version!r}")
        return sample

    def collector(self, name: str) -> CollectorStatus:
        return next(c for c in self.collectors if c.name == name)


def open_backend(snapshot_path: str | None = None) -> NvmlBackend:
    """The snapshot backend for a file (SnapshotError if unusable), else the driver (initialised
    lazily)."""
    if snapshot_path is not None:
        from stagelens.probes.nvml_snapshot import SnapshotBackend

        return SnapshotBackend.from_file(snapshot_path)
    from stagelens.probes.nvml_real import RealBackend

    return RealBackend()


class NodeProbe:
    """Samples a node. Keeps static device facts and the previous tick's counters between
    samples."""

    def __init__(
        self,
        backend: NvmlBackend | None = None,
        *,
        pid: int | None = None,
        host: bool = True,
        topology: bool = True,
        nvlink_errors_every: int = 10,
    ) -> None:
        self.backend = backend if backend is not None else open_backend()
        self.reader = NvmlReader(self.backend)
        self.links = LinkState(errors_every=nvlink_errors_every)
        self.host_probe = HostProbe(pid) if host else None
        self.want_topology = topology
        self._infos: list[DeviceInfo] = []
        self._topology: Topology | None = None
        self._versions: tuple[str | None, int | None] | None = None

    def close(self) -> None:
        self.backend.close()

    # -- collectors --------------------------------------------------------------------------
    def _device_infos(self, count: int) -> list[DeviceInfo]:
        if len(self._infos) != count:
            self._infos = [read_device_info(self.reader, i) for i in range(count)]
            self._topology = None
            return self._infos
        for i, info in enumerate(self._infos):
            if info.lost:  # asked again each tick: cheap, and a reset GPU comes back
                fresh = read_device_info(self.reader, i)
                if not fresh.lost:
                    self._infos[i], self._topology = fresh, None
        return self._infos

    def _collect_nvml(self, sample: NodeSample) -> None:
        count = self.reader.get("device_count")
        if count is None:
            raise RuntimeError(f"nvmlDeviceGetCount failed: {self.reader.errors.get(None)}")
        if self._versions is None:
            self._versions = (self.reader.get("driver_version"),
                              self.reader.get("cuda_driver_version"))
        sample.driver.driver_version, sample.driver.cuda_driver_version = self._versions
        for info in self._device_infos(count):
            try:
                sample.gpus.append(read_gpu(self.reader, info))
            except DeviceLost:
                info.lost = True
                self._topology = None
                sample.gpus.append(GpuSample(index=info.index, uuid=info.uuid, name=info.name,
                                             pci_bus_id=info.pci_bus_id, lost=True))

    def _collect_links(self, sample: NodeSample) -> None:
        self.links.begin_tick()
        now = self.backend.timestamp()
        by_bus = {normalise_bus_id(d.pci_bus_id): d.index for d in self._infos if d.pci_bus_id}
        for gpu in sample.gpus:
            info = self._infos[gpu.index]
            if gpu.lost:
                continue
            try:
                gpu.pcie = self.links.sample_pcie(self.reader, info)
                gpu.nvlinks = self.links.sample_nvlinks(self.reader, info, now, by_bus)
            except DeviceLost:
                gpu.lost = info.lost = True
                gpu.pcie, gpu.nvlinks = None, []
                self._topology = None  # its row turns N/A next tick

    def _collect_topology(self, sample: NodeSample) -> None:
        if self._topology is None:
            self._topology = build_topology(self.reader, self._infos)
        sample.topology = self._topology

    def _collect_host(self, sample: NodeSample) -> None:
        assert self.host_probe is not None  # only scheduled when enabled
        sample.host = self.host_probe.sample()

    # -- one tick ----------------------------------------------------------------------------
    def _run(self, sample: NodeSample, name: str, fn: Callable[[NodeSample], None], skip: str | None) -> None:
        start = time.perf_counter()
        error = skip
        if skip is None:
            try:
                fn(sample)
            except NoDriverError as exc:
                sample.driver.state, sample.driver.message = "no_driver", str(exc)
                error = str(exc)
            except Exception as exc:  # one broken collector must not take the sample down
                log.debug("collector %s failed", name, exc_info=True)
                error = f"{type(exc).__name__}: {exc}"
        sample.collectors.append(CollectorStatus(name, error is None, time.perf_counter() - start,
                                                 error))

    def sample(self) -> NodeSample:
        """One node sample: per-GPU state with its links, the topology, the host, collector
        status."""
        self.backend.begin_tick()
        self.reader.clear()
        sample = NodeSample(
            version=SAMPLE_VERSION,
            hostname=socket.gethostname(),
            time_unix=time.time(),
            time_monotonic=self.backend.timestamp(),
            driver=DriverStatus(state="ok", source=self.backend.source),
        )
        self._run(sample, "nvml", self._collect_nvml, None)
        nvml_ok = sample.collectors[-1].success
        skip = None if nvml_ok else "skipped: the nvml collector failed"
        if self.want_topology:
            self._run(sample, "topology", self._collect_topology, skip)
        self._run(sample, "links", self._collect_links, skip)
        if self.host_probe is not None:
            self._run(sample, "host", self._collect_host, None)
        if not nvml_ok and sample.driver.state == "ok":
            sample.driver.state = "error"
            sample.driver.message = sample.collectors[0].error
        for gpu in sample.gpus:
            gpu.unsupported = self.reader.unsupported(gpu.index)
            gpu.errors = self.reader.device_errors(gpu.index)
        return sample
