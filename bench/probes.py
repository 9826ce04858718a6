"""Probe benchmark: the cost of one full node sample.

    python bench/probes.py [--quick] [--json]

Replays the DGX A100 snapshot (8 GPUs x 12 NVLinks: nvml, topology, links, host collectors and the
to_dict() a Frame embeds) and, where an NVIDIA driver is present, samples the real node the same
way. Prints medians over N samples; the target is under 5 ms a sample. Never pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stagelens.probes.errors import NoDriverError  # noqa: E402
from stagelens.probes.nvml_real import RealBackend  # noqa: E402
from stagelens.probes.nvml_snapshot import SnapshotBackend  # noqa: E402
from stagelens.probes.sample import NodeProbe  # noqa: E402

DGX = ROOT / "tests" / "fixtures" / "nvml" / "dgx_a100.json"
TARGET_MS = 5.0


def measure(probe: NodeProbe, n: int) -> dict:
    probe.sample()  # first tick reads the static facts and the topology once; steady state is what repeats
    totals: list[float] = []
    per_collector: dict[str, list[float]] = {}
    for _ in range(n):
        start = time.perf_counter()
        sample = probe.sample()
        sample.to_dict()
        totals.append((time.perf_counter() - start) * 1000)
        for c in sample.collectors:
            per_collector.setdefault(c.name, []).append(c.duration_seconds * 1000)
    first = probe.sample()
    return {
        "samples": n,
        "sample_ms": round(statistics.median(totals), 3),
        "sample_ms_p90": round(sorted(totals)[int(0.9 * (n - 1))], 3),
        "collector_ms": {k: round(statistics.median(v), 3) for k, v in per_collector.items()},
        "gpus": len(first.gpus),
        "nvlinks": sum(len(g.nvlinks) for g in first.gpus),
    }


def real_node(n: int) -> dict | None:
    backend = RealBackend()
    try:
        backend.device_count()
    except Exception as exc:  # no driver (LibraryNotFound/DriverNotLoaded) or no usable NVML
        return {"skipped": f"no NVIDIA driver: {type(exc).__name__}"}
    try:
        return measure(NodeProbe(backend, pid=os.getpid()), n)
    except NoDriverError as exc:
        return {"skipped": str(exc)}
    finally:
        backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    n = 30 if args.quick else 300
    result = {
        "target_ms": TARGET_MS,
        "snapshot_dgx_a100": measure(NodeProbe(SnapshotBackend.from_file(str(DGX)), pid=os.getpid()), n),
        "real": real_node(n),
    }
    if args.json:
        print(json.dumps(result))
        return
    snap = result["snapshot_dgx_a100"]
    print(f"DGX A100 snapshot ({snap['gpus']} GPUs, {snap['nvlinks']} NVLinks), median of {n} samples:")
    p90 = snap["sample_ms_p90"]
    print(f"  sample_ms      {snap['sample_ms']:.3f}  (p90 {p90:.3f}, target < {TARGET_MS})")
    for name, ms in snap["collector_ms"].items():
        print(f"  {name:<14} {ms:.3f} ms")
    real = result["real"]
    if real and "skipped" not in real:
        print(f"real node ({real['gpus']} GPUs, {real['nvlinks']} NVLinks), median of {n} samples:")
        print(f"  sample_ms      {real['sample_ms']:.3f}  (p90 {real['sample_ms_p90']:.3f})")
        for name, ms in real["collector_ms"].items():
            print(f"  {name:<14} {ms:.3f} ms")
    else:
        print(f"real node: {real['skipped'] if real else 'skipped'}")


if __name__ == "__main__":
    main()
