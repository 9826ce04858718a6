"""The node's plain copy bandwidth: bytes a large tensor copy reads and writes per second, per
device.

Measured once per node and device (best of a few runs) and cached as JSON under the user cache dir,
with the date it was measured. Only `POST /api/v1/bandwidth-probe` (agent/server/control.py) reads
it, to report what the device's memory does on a simple copy. The diagnosis does not judge attention
by it: `effective_bandwidth_ratio` compares attention against the engine's own attention on an ideal
KV layout (engine_hooks/hooks/calibrate.py, engine_hooks/hooks/reference.py), which isolates what
the layout costs. torch is imported here only, and only when a measurement is actually needed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DEFAULT_SIZE_BYTES = 256 * 1024 * 1024
CACHE_FILE = "bandwidth.json"


@dataclass
class BandwidthReference:
    node: str
    device: str
    device_name: str
    bytes_per_second: float
    size_bytes: int
    runs: int
    measured_at: str  # RFC 3339, UTC
    cached: bool = False  # True when read from the cache file rather than measured now

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stagelens"


def _device_name(device: str) -> str:
    if not device.startswith("cuda"):
        return "cpu"
    import torch  # lazy: only a GPU device needs torch to be named

    return str(torch.cuda.get_device_name(torch.device(device)))


def measure_copy_bandwidth(device: str = "cpu", size_bytes: int = DEFAULT_SIZE_BYTES, runs: int = 3) -> float:
    """Bytes moved (read + written) per second by the fastest of `runs` copies of a `size_bytes`
    tensor."""
    import torch  # lazy: the agent runs without torch unless a reference has to be measured

    dev = torch.device(device)
    cuda = dev.type == "cuda"
    n = max(size_bytes // 4, 1)
    src = torch.ones(n, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up: page faults, allocator, kernel launch caches
    if cuda:
        torch.cuda.synchronize(dev)
    best = float("inf")
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        dst.copy_(src)
        if cuda:
            torch.cuda.synchronize(dev)
        best = min(best, time.perf_counter() - start)
    return 2 * n * 4 / max(best, 1e-9)


def _key(node: str, device: str, device_name: str) -> str:
    return f"{node}/{device}/{device_name}"  # a swapped GPU model must not reuse the old figure


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # missing or damaged cache: measure again
    return data if isinstance(data, dict) else {}


def _store(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a concurrent reader never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".bandwidth-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


# one measurement at a time: each holds buffers of `size_bytes` twice
_measuring = threading.Lock()
# key -> (when measured, monotonic), this process
_fresh: dict[str, tuple[float, BandwidthReference]] = {}


def get_reference_bandwidth(
    device: str = "cpu",
    *,
    size_bytes: int = DEFAULT_SIZE_BYTES,
    runs: int = 3,
    cache_path: str | os.PathLike[str] | None = None,
    refresh: bool = False,
) -> BandwidthReference:
    """The cached reference for this node and device, measuring (and caching) it if there is none.
    Concurrent callers share one measurement: whoever waited for a measurement gets its result."""
    asked = time.monotonic()
    path = Path(cache_path) if cache_path is not None else cache_dir() / CACHE_FILE
    node = socket.gethostname()
    name = _device_name(device)
    key = _key(node, device, name)
    with _measuring:
        fresh = _fresh.get(key)
        if fresh is not None and fresh[0] >= asked:
            return fresh[1]
        entries = _load(path)
        entry = entries.get(key)
        if entry and not refresh:
            try:
                return BandwidthReference(**{**entry, "cached": True})
            except TypeError:
                pass  # written by another version: measure again
        ref = BandwidthReference(
            node=node,
            device=device,
            device_name=name,
            bytes_per_second=measure_copy_bandwidth(device, size_bytes, runs),
            size_bytes=size_bytes,
            runs=runs,
            measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )
        entries[key] = {k: v for k, v in ref.to_dict().items() if k != "cached"}
        _store(path, entries)
        _fresh[key] = (time.monotonic(), ref)
        return ref
