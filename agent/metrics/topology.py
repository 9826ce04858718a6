"""The `nvidia-smi topo -m` matrix as an info metric, one series per ordered pair of GPUs."""

from __future__ import annotations

from stagelens import catalogue as c
from stagelens.metrics.families import Scrape


def collect(out: Scrape, frame, _diagnosis) -> None:
    topo = frame.node_sample.topology if frame and frame.node_sample is not None else None
    if topo is None:
        return
    # the matrix's rows follow the device indices, labelled GPU0..; the metric's gpu label is the
    # index
    for i, row in enumerate(topo.matrix):
        for j, path in enumerate(row):
            if i != j:
                out.add(c.GPU_TOPOLOGY, 1, gpu=str(i), peer=str(j), path=path)
    for i, numa in enumerate(topo.numa_affinity):
        out.add(c.GPU_NUMA_NODE, numa, gpu=str(i))
