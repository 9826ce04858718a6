"""The NVML backend that replays a `stagelens-nvml/1` snapshot (docs/design.md, "NVML snapshot
format").

Series advance one element per `begin_tick()` and hold their last element after the end. Errors
are raised as pynvml's own NVMLError subclasses, so replay goes through the same error policy as
the driver. A value the snapshot does not hold answers NotSupported, as a driver would.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pynvml

from stagelens.probes.errors import SnapshotError
from stagelens.probes.nvml_backend import (
    FI_NVLINK_RX_KIB,
    FI_NVLINK_TX_KIB,
    NVML_FUNCTION,
    TOPOLOGY_LEVELS,
    FieldValue,
    error_class,
)

FORMAT = "stagelens-nvml/1"
SCALAR_SERIES = (
    "utilization_gpu", "utilization_memory", "memory_used_bytes", "pcie_tx_kBps", "pcie_rx_kBps",
    "pcie_replay_counter", "clock_sm_mhz", "clock_mem_mhz", "throttle_reasons", "power_mw",
    "temperature_c",
)
LINK_SERIES = (
    "nvlink_tx_kib", "nvlink_rx_kib", "nvlink_errors_replay", "nvlink_errors_recovery",
    "nvlink_errors_crc_flit", "nvlink_errors_crc_data",
)
# Keys a device must have unless its `errors` say the function that would have produced them fails.
_REQUIRED = {"name": "nvmlDeviceGetName", "uuid": "nvmlDeviceGetUUID",
             "pci_bus_id": "nvmlDeviceGetPciInfo"}
_PCIE_KEYS = ("gen", "gen_max", "width", "width_max")
_PAIR = re.compile(r"^(\d+)-(\d+)$")
# a DGX snapshot of many ticks is a few MB; more is not a snapshot
MAX_SNAPSHOT_BYTES = 256 * 2**20


def _num(x: Any) -> bool:
    """A finite JSON number: Python's json reads NaN and Infinity, which no NVML call answers."""
    return isinstance(x, int | float) and not isinstance(x, bool) and (isinstance(x, int) or math.isfinite(x))


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _shown(value: Any) -> str:
    return repr(value)[:40]


class _Checker:
    """Validates the parsed JSON, naming the file and the JSON path of the first problem."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, message: str) -> SnapshotError:
        return SnapshotError(self.path, message)

    def errors(self, where: str, errors: Any) -> None:
        if not isinstance(errors, dict):
            raise self.fail(f"{where}: expected an object of NVML function -> error name")
        for fn, name in errors.items():
            if not isinstance(name, str) or error_class(name) is None:
                raise self.fail(f"{where}.{fn}: unknown NVML error {name!r} (e.g. NotSupported, GpuIsLost)")

    def text(self, where: str, value: Any) -> None:
        """A string NVML would answer: printable (a terminal escape in it would reach `topo`'s
        reader)."""
        if not isinstance(value, str):
            raise self.fail(f"{where}: expected a string")
        bad = next((i for i, char in enumerate(value) if not char.isprintable()), None)
        if bad is not None:
            raise self.fail(f"{where}: expected printable text, found {value[bad]!r} at character {bad}")

    def series(self, where: str, values: Any) -> None:
        if not isinstance(values, list) or not values or not all(_num(v) for v in values):
            raise self.fail(f"{where}: expected a non-empty list of numbers")

    def device(self, k: int, dev: Any) -> None:
        where = f"devices[{k}]"
        if not isinstance(dev, dict):
            raise self.fail(f"{where}: expected an object")
        if not isinstance(dev.get("index"), int):
            raise self.fail(f"{where}: missing key 'index' (an integer)")
        self.errors(f"{where}.errors", dev.get("errors", {}))
        errors = dev.get("errors", {})
        for key, fn in _REQUIRED.items():
            if key not in dev and fn not in errors and "*" not in errors:
                raise self.fail(f"{where}: missing key {key!r}")
        for key in ("name", "uuid", "pci_bus_id", "cpu_affinity", "driver_version"):
            if key in dev:
                self.text(f"{where}.{key}", dev[key])
        if not _int(dev.get("numa_node", 0)) or dev.get("numa_node", 0) < -1:
            raise self.fail(f"{where}.numa_node: expected an integer (-1: none), got {_shown(dev['numa_node'])}")
        if not _int(dev.get("memory_total_bytes", 0)) or dev.get("memory_total_bytes", 0) < 0:
            raise self.fail(f"{where}.memory_total_bytes: expected a whole number of bytes, "
                            f"got {_shown(dev['memory_total_bytes'])}")
        pcie = dev.get("pcie", {})
        if not isinstance(pcie, dict) or not all(_int(pcie.get(key, 0)) for key in _PCIE_KEYS):
            raise self.fail(f"{where}.pcie: expected an object of integers {', '.join(_PCIE_KEYS)}")
        self.nvlinks(where, dev.get("nvlinks", []))
        self.device_series(where, dev.get("series", {}))

    def nvlinks(self, where: str, links: Any) -> None:
        if not isinstance(links, list):
            raise self.fail(f"{where}.nvlinks: expected a list")
        for n, link in enumerate(links):
            if not isinstance(link, dict) or not isinstance(link.get("link"), int):
                raise self.fail(f"{where}.nvlinks[{n}]: missing key 'link' (an integer)")
            if not isinstance(link.get("active", False), bool):
                raise self.fail(f"{where}.nvlinks[{n}].active: expected true or false")
            if not _int(link.get("version", 0)):
                raise self.fail(f"{where}.nvlinks[{n}].version: expected an integer")
            if not isinstance(link.get("remote", ""), str) or not link.get("remote", "").isprintable():
                raise self.fail(f"{where}.nvlinks[{n}].remote: expected \"switch\" or a PCI bus id")

    def device_series(self, where: str, series: Any) -> None:
        if not isinstance(series, dict):
            raise self.fail(f"{where}.series: expected an object")
        for key, values in series.items():
            if key in SCALAR_SERIES:
                self.series(f"{where}.series.{key}", values)
            elif key in LINK_SERIES:
                if not isinstance(values, dict) or not all(str(k).isdigit() for k in values):
                    raise self.fail(f"{where}.series.{key}: expected an object of link number -> list")
                for link, v in values.items():
                    self.series(f"{where}.series.{key}.{link}", v)
            else:
                raise self.fail(f"{where}.series: unknown series {key!r}")

    def snapshot(self, data: Any) -> None:
        if not isinstance(data, dict):
            raise self.fail("expected a JSON object")
        if "error" in data:
            if not isinstance(data["error"], str) or error_class(data["error"]) is None:
                raise self.fail(f"error: unknown NVML error {data['error']!r}")
            return
        if data.get("format") != FORMAT:
            raise self.fail(f"format: expected {FORMAT!r}, found {_shown(data.get('format'))}")
        self.text("driver_version", data.get("driver_version", ""))
        if not _int(data.get("cuda_driver_version", 0)):
            raise self.fail("cuda_driver_version: expected an integer (e.g. 12040)")
        devices = data.get("devices")
        if not isinstance(devices, list):
            raise self.fail("missing key 'devices' (a list)")
        for k, dev in enumerate(devices):
            self.device(k, dev)
        indices = sorted(dev["index"] for dev in devices)
        if indices != list(range(len(devices))):
            raise self.fail(f"devices: indices must be 0..{len(devices) - 1}, found {indices}")
        pairs = data.get("pcie_common_ancestor", {})
        if not isinstance(pairs, dict):
            raise self.fail("pcie_common_ancestor: expected an object of \"i-j\" -> level")
        for pair, level in pairs.items():
            m = _PAIR.match(pair)
            if not m or not int(m[1]) < int(m[2]) < len(devices):
                raise self.fail(f"pcie_common_ancestor.{pair}: expected a key \"i-j\" of GPU indices, i < j")
            if level not in TOPOLOGY_LEVELS.values():
                raise self.fail(f"pcie_common_ancestor.{pair}: unknown level {level!r}")
        interval = data.get("interval_s", 1.0)
        if not _num(interval) or interval <= 0:
            raise self.fail("interval_s: expected a positive number of seconds")


def load_snapshot(path: str) -> dict[str, Any]:
    """Read and validate a snapshot file; SnapshotError (naming the file, and the line) if it is
    unusable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SNAPSHOT_BYTES + 1)
    except OSError as exc:
        raise SnapshotError(path, f"cannot read NVML snapshot: {exc.strerror or exc}") from exc
    if len(raw) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(path, f"not an NVML snapshot: larger than {MAX_SNAPSHOT_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SnapshotError(path, f"not an NVML snapshot: byte {exc.start} is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(path, f"not valid JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from exc
    except RecursionError:
        raise SnapshotError(path, "not an NVML snapshot: JSON nested too deeply") from None
    _Checker(path).snapshot(data)
    return data


class SnapshotBackend:
    """Replays a snapshot. Construct with `from_file(path)` or directly from an already parsed
    dict."""

    live = False

    def __init__(self, data: dict[str, Any], source: str = "<snapshot>") -> None:
        _Checker(source).snapshot(data)
        self.data = data
        self.source = f"snapshot {source}"
        self._error = error_class(data["error"]) if "error" in data else None
        devices = data.get("devices", [])
        self._devices = {dev["index"]: dev for dev in devices}
        self._interval = float(data.get("interval_s", 1.0))
        self._ticks = 0

    @classmethod
    def from_file(cls, path: str) -> SnapshotBackend:
        return cls(load_snapshot(path), source=path)

    # -- ticks -------------------------------------------------------------------------------
    @property
    def tick(self) -> int:
        return max(self._ticks - 1, 0)

    def begin_tick(self) -> None:
        self._ticks += 1

    def timestamp(self) -> float:
        return self.tick * self._interval

    def close(self) -> None:
        pass

    # -- lookup ------------------------------------------------------------------------------
    def _system(self) -> None:
        if self._error is not None:
            raise self._error()

    def _dev(self, i: int, method: str) -> dict[str, Any]:
        self._system()
        dev = self._devices.get(i)
        if dev is None:
            raise pynvml.NVMLError_InvalidArgument()
        errors = dev.get("errors", {})
        name = errors.get(NVML_FUNCTION[method]) or errors.get("*")
        if name:
            error = error_class(name)
            assert error is not None   # _Checker refused unknown error names
            raise error()
        return dev

    def _static(self, i: int, method: str, key: str, sub: str | None = None) -> Any:
        dev = self._dev(i, method)
        value = dev.get(key) if sub is None else dev.get(key, {}).get(sub)
        if value is None:
            raise pynvml.NVMLError_NotSupported()
        return value

    def _at(self, values: list[Any] | None) -> Any:
        if values is None:
            raise pynvml.NVMLError_NotSupported()
        return values[min(self.tick, len(values) - 1)]

    def _series(self, i: int, method: str, key: str) -> int:
        return int(self._at(self._dev(i, method).get("series", {}).get(key)))

    def _link_series(self, dev: dict[str, Any], key: str, link: int) -> list[Any] | None:
        return dev.get("series", {}).get(key, {}).get(str(link))

    def _link(self, i: int, method: str, link: int) -> dict[str, Any]:
        for entry in self._dev(i, method).get("nvlinks", []):
            if entry["link"] == link:
                return entry
        raise pynvml.NVMLError_InvalidArgument()

    # -- system ------------------------------------------------------------------------------
    def driver_version(self) -> str:
        self._system()
        if "driver_version" not in self.data:
            raise pynvml.NVMLError_NotSupported()
        return str(self.data["driver_version"])

    def cuda_driver_version(self) -> int:
        self._system()
        if "cuda_driver_version" not in self.data:
            raise pynvml.NVMLError_NotSupported()
        return int(self.data["cuda_driver_version"])

    def device_count(self) -> int:
        self._system()
        return len(self._devices)

    # -- device ------------------------------------------------------------------------------
    def name(self, i: int) -> str:
        return self._static(i, "name", "name")

    def uuid(self, i: int) -> str:
        return self._static(i, "uuid", "uuid")

    def pci_bus_id(self, i: int) -> str:
        return self._static(i, "pci_bus_id", "pci_bus_id")

    def numa_node(self, i: int) -> int:
        return int(self._static(i, "numa_node", "numa_node"))

    def cpu_affinity(self, i: int) -> str:
        return self._static(i, "cpu_affinity", "cpu_affinity")

    def memory_info(self, i: int) -> tuple[int, int]:
        total = int(self._static(i, "memory_info", "memory_total_bytes"))
        return total, self._series(i, "memory_info", "memory_used_bytes")

    def utilization(self, i: int) -> tuple[int, int]:
        return self._series(i, "utilization", "utilization_gpu"), self._series(
            i, "utilization", "utilization_memory"
        )

    def clock_mhz(self, i: int, which: str) -> int:
        return self._series(i, "clock_mhz", f"clock_{which}_mhz")

    def throttle_reasons(self, i: int) -> int:
        return self._series(i, "throttle_reasons", "throttle_reasons")

    def power_mw(self, i: int) -> int:
        return self._series(i, "power_mw", "power_mw")

    def temperature_c(self, i: int) -> int:
        return self._series(i, "temperature_c", "temperature_c")

    # -- PCIe --------------------------------------------------------------------------------
    def pcie_gen(self, i: int) -> int:
        return int(self._static(i, "pcie_gen", "pcie", "gen"))

    def pcie_gen_max(self, i: int) -> int:
        return int(self._static(i, "pcie_gen_max", "pcie", "gen_max"))

    def pcie_width(self, i: int) -> int:
        return int(self._static(i, "pcie_width", "pcie", "width"))

    def pcie_width_max(self, i: int) -> int:
        return int(self._static(i, "pcie_width_max", "pcie", "width_max"))

    def pcie_throughput_kBps(self, i: int, direction: str) -> int:
        return self._series(i, "pcie_throughput_kBps", f"pcie_{direction}_kBps")

    def pcie_replay_counter(self, i: int) -> int:
        return self._series(i, "pcie_replay_counter", "pcie_replay_counter")

    # -- NVLink ------------------------------------------------------------------------------
    def nvlink_ids(self, i: int) -> list[int]:
        links = self._dev(i, "nvlink_ids").get("nvlinks", [])
        if not links:
            raise pynvml.NVMLError_NotSupported()  # what a driver says for a GPU without NVLink
        return sorted(entry["link"] for entry in links)

    def nvlink_active(self, i: int, link: int) -> bool:
        return bool(self._link(i, "nvlink_active", link).get("active", False))

    def nvlink_version(self, i: int, link: int) -> int:
        version = self._link(i, "nvlink_version", link).get("version")
        if version is None:
            raise pynvml.NVMLError_NotSupported()
        return int(version)

    def nvlink_remote(self, i: int, link: int) -> str:
        remote = self._link(i, "nvlink_remote", link).get("remote")
        if remote is None:
            raise pynvml.NVMLError_NotSupported()
        return remote

    def nvlink_error_counter(self, i: int, link: int, counter: str) -> int:
        dev = self._dev(i, "nvlink_error_counter")
        return int(self._at(self._link_series(dev, f"nvlink_errors_{counter}", link)))

    def field_values(self, i: int, fields: list[tuple[int, int]]) -> list[FieldValue]:
        dev = self._dev(i, "field_values")
        keys = {FI_NVLINK_TX_KIB: "nvlink_tx_kib", FI_NVLINK_RX_KIB: "nvlink_rx_kib"}
        out: list[FieldValue] = []
        for field, scope in fields:
            values = self._link_series(dev, keys[field], scope) if field in keys else None
            # Per-value failure, as nvmlDeviceGetFieldValues reports it: the call itself succeeds.
            out.append(pynvml.NVMLError_NotSupported() if values is None else int(self._at(values)))
        return out

    # -- topology ----------------------------------------------------------------------------
    def common_ancestor(self, i: int, j: int) -> str:
        self._dev(i, "common_ancestor")
        self._dev(j, "common_ancestor")
        level = self.data.get("pcie_common_ancestor", {}).get(f"{min(i, j)}-{max(i, j)}")
        if level is None:
            raise pynvml.NVMLError_NotSupported()
        return level
