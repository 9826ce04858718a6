"""`probe record`: ask a backend the questions the probes ask, and write the answers as
stagelens-nvml/1.

The snapshot records NVML's answers, not our conclusions, so topology and link logic is exercised
again on replay. A value that answers NotSupported is simply left out (replay answers NotSupported
for what it does not hold); other errors are recorded by NVML function in the device's `errors`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pynvml

from stagelens.probes.nvml_backend import (
    FI_NVLINK_RX_KIB,
    FI_NVLINK_TX_KIB,
    NVLINK_ERROR_COUNTERS,
    NVML_FUNCTION,
    NvmlBackend,
    error_name,
)
from stagelens.probes.nvml_reader import no_driver_error
from stagelens.probes.nvml_snapshot import FORMAT

_MISSING = object()


class _Lost(Exception):
    pass


class _Recorder:
    def __init__(self, backend: NvmlBackend) -> None:
        self.backend = backend

    def ask(self, errors: dict[str, str], method: str, *args: Any) -> Any:
        try:
            return getattr(self.backend, method)(*args)
        except (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded) as exc:
            raise no_driver_error(exc, self.backend.source) from exc
        except pynvml.NVMLError_GpuIsLost:
            raise _Lost() from None
        except pynvml.NVMLError as exc:
            if not isinstance(exc, pynvml.NVMLError_NotSupported):
                errors.setdefault(NVML_FUNCTION[method], error_name(exc))
            return _MISSING

    def static(self, i: int) -> dict[str, Any]:
        errors: dict[str, str] = {}
        dev: dict[str, Any] = {"index": i}
        for key in ("uuid", "name", "pci_bus_id", "numa_node", "cpu_affinity"):
            value = self.ask(errors, key, i)
            if value is not _MISSING:
                dev[key] = value
            elif key in ("uuid", "name", "pci_bus_id"):  # required keys: say why they are absent
                errors.setdefault(NVML_FUNCTION[key], "NotSupported")
        memory = self.ask(errors, "memory_info", i)
        if memory is not _MISSING:
            dev["memory_total_bytes"] = memory[0]
        pcie = {k: self.ask(errors, f"pcie_{k}", i) for k in ("gen", "gen_max", "width", "width_max")}
        dev["pcie"] = {k: v for k, v in pcie.items() if v is not _MISSING}
        links = self.ask(errors, "nvlink_ids", i)
        dev["nvlinks"] = []
        for link in [] if links is _MISSING else links:
            entry: dict[str, Any] = {"link": link,
                                     "active": self.ask(errors, "nvlink_active", i, link)}
            if entry["active"] is _MISSING:
                continue
            for key in ("version", "remote"):
                value = self.ask(errors, f"nvlink_{key}", i, link)
                if value is not _MISSING:
                    entry[key] = value
            dev["nvlinks"].append(entry)
        dev["series"], dev["errors"] = {}, errors
        return dev

    def tick(self, dev: dict[str, Any], acc: dict[str, Any]) -> None:
        """Append this tick's answers to `acc` (series key -> list, or None once a tick failed)."""
        i, errors = dev["index"], dev["errors"]

        def put(key: str, value: Any) -> None:
            if value is _MISSING:
                acc[key] = None
            elif acc.setdefault(key, []) is not None:
                acc[key].append(value)

        util = self.ask(errors, "utilization", i)
        put("utilization_gpu", util if util is _MISSING else util[0])
        put("utilization_memory", util if util is _MISSING else util[1])
        memory = self.ask(errors, "memory_info", i)
        put("memory_used_bytes", memory if memory is _MISSING else memory[1])
        put("pcie_tx_kBps", self.ask(errors, "pcie_throughput_kBps", i, "tx"))
        put("pcie_rx_kBps", self.ask(errors, "pcie_throughput_kBps", i, "rx"))
        for key, method, *args in (
            ("pcie_replay_counter", "pcie_replay_counter"), ("clock_sm_mhz", "clock_mhz", "sm"),
            ("clock_mem_mhz", "clock_mhz", "mem"), ("throttle_reasons", "throttle_reasons"),
            ("power_mw", "power_mw"), ("temperature_c", "temperature_c"),
        ):
            put(key, self.ask(errors, method, i, *args))
        links = [entry["link"] for entry in dev["nvlinks"]]
        if links:
            fields = [(fid, link) for link in links for fid in (FI_NVLINK_TX_KIB, FI_NVLINK_RX_KIB)]
            values = self.ask(errors, "field_values", i, fields)
            if values is _MISSING:
                values = [_MISSING] * len(fields)
            for n, link in enumerate(links):
                for key, value in (("nvlink_tx_kib", values[2 * n]),
                                   ("nvlink_rx_kib", values[2 * n + 1])):
                    put(f"{key}/{link}", _MISSING if isinstance(value, pynvml.NVMLError) else value)
                for counter in NVLINK_ERROR_COUNTERS:
                    value = self.ask(errors, "nvlink_error_counter", i, link, counter)
                    put(f"nvlink_errors_{counter}/{link}", value)


def _series(acc: dict[str, Any]) -> dict[str, Any]:
    series: dict[str, Any] = {}
    for key, values in acc.items():
        if values is None:
            continue  # failed on some tick: leave it out, replay answers NotSupported
        name, _, link = key.partition("/")
        if link:
            series.setdefault(name, {})[link] = values
        else:
            series[name] = values
    return series


def record_snapshot(
    backend: NvmlBackend,
    ticks: int = 5,
    interval_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """A stagelens-nvml/1 snapshot of `ticks` samples. Raises NoDriverError on a node without a
    driver."""
    rec = _Recorder(backend)
    backend.begin_tick()
    start = backend.timestamp()
    system: dict[str, str] = {}
    count = rec.ask(system, "device_count")
    if count is _MISSING:
        raise RuntimeError(f"nvmlDeviceGetCount failed: {system}")
    snap: dict[str, Any] = {"format": FORMAT}
    for key in ("driver_version", "cuda_driver_version"):
        value = rec.ask(system, key)
        if value is not _MISSING:
            snap[key] = value
    devices: list[dict[str, Any]] = []
    for i in range(count):
        try:
            devices.append(rec.static(i))
        except _Lost:
            devices.append({"index": i, "errors": {"*": "GpuIsLost"}})
    accs: list[dict[str, Any]] = [{} for _ in devices]
    end = start
    tick_start = time.monotonic()
    for t in range(max(ticks, 1)):
        if t:
            if backend.live:  # a replayed snapshot has nothing to wait for
                sleep(max(0.0, interval_s - (time.monotonic() - tick_start)))
                tick_start = time.monotonic()
            backend.begin_tick()
        end = backend.timestamp()
        for i, (dev, acc) in enumerate(zip(devices, accs, strict=True)):
            if "series" not in dev:
                continue  # lost
            try:
                rec.tick(dev, acc)
            except _Lost:
                devices[i] = {"index": i, "errors": {"*": "GpuIsLost"}}
    for dev, acc in zip(devices, accs, strict=True):
        if "series" in dev:
            dev["series"] = _series(acc)
            if not dev["errors"]:
                del dev["errors"]
    snap["interval_s"] = round((end - start) / (ticks - 1), 6) if ticks > 1 and end > start else interval_s
    snap["devices"] = devices
    snap["pcie_common_ancestor"] = _ancestors(rec, devices)
    return snap


def _ancestors(rec: _Recorder, devices: list[dict[str, Any]]) -> dict[str, str]:
    alive = [d["index"] for d in devices if d.get("errors", {}).get("*") != "GpuIsLost"]
    out: dict[str, str] = {}
    for n, i in enumerate(alive):
        for j in alive[n + 1 :]:
            try:
                level = rec.ask({}, "common_ancestor", i, j)
            except _Lost:
                continue
            if level is not _MISSING:
                out[f"{i}-{j}"] = level
    return out


def dump_snapshot(snap: dict[str, Any]) -> str:
    """JSON for people too: one key per line, short lists and objects of plain values kept on one
    line."""
    return _dump(snap, 0) + "\n"


def _dump(value: Any, depth: int) -> str:
    flat = json.dumps(value)
    if not isinstance(value, dict | list) or len(flat) + 2 * depth <= 100:
        return flat
    items = value.values() if isinstance(value, dict) else value
    if isinstance(value, list) and not any(isinstance(v, dict | list) for v in items):
        return flat  # a long series stays on one line
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict):
        lines = [f"{inner}{json.dumps(k)}: {_dump(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(lines) + f"\n{pad}}}"
    return "[\n" + ",\n".join(f"{inner}{_dump(v, depth + 1)}" for v in value) + f"\n{pad}]"
