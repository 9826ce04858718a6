"""Read-only node probes: NVML (real and snapshot backends), topology, links, GPU, host, copy
bandwidth.

This package imports nothing else of stagelens; torch is imported lazily by the copy-bandwidth
measurement only.
"""

from stagelens.probes.bandwidth import BandwidthReference, get_reference_bandwidth, measure_copy_bandwidth
from stagelens.probes.errors import NoDriverError, ProbeError, SnapshotError
from stagelens.probes.nvml_backend import NvmlBackend
from stagelens.probes.nvml_record import dump_snapshot, record_snapshot
from stagelens.probes.sample import CollectorStatus, NodeProbe, NodeSample, open_backend
from stagelens.probes.topology import Topology, collect_topology, render_topology_text, topology_json

__all__ = [
    "BandwidthReference",
    "CollectorStatus",
    "NoDriverError",
    "NodeProbe",
    "NodeSample",
    "NvmlBackend",
    "ProbeError",
    "SnapshotError",
    "Topology",
    "collect_topology",
    "dump_snapshot",
    "get_reference_bandwidth",
    "measure_copy_bandwidth",
    "open_backend",
    "record_snapshot",
    "render_topology_text",
    "topology_json",
]
