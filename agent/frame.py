"""`Frame`: one sampling tick — the node sample, the engine snapshot and how each collector fared.

The sampler makes frames; diagnosis, the Prometheus collector, the HTTP API, the TUI and
record/replay all read them. Typed end to end, JSON both ways, versioned: the node sample
(probes.sample.NodeSample) and the engine snapshot (engine_hooks.records.snapshot) each read and
check their own JSON, and so does the frame its collector statuses (probes.sample.CollectorStatus).
A frame read back came from a file or another process: every string in it is made printable first
(agent.printable), so a topology, a model name or an error that held terminal escapes shows them as
visible characters, on every surface.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stagelens.engine_hooks.records.snapshot import EngineSnapshot, SnapshotError, Window
from stagelens.numbers import is_finite_number, shown
from stagelens.printable import TooDeep, printable_data
from stagelens.probes.gpu import GpuSample
from stagelens.probes.links import NvlinkSample, PcieSample
from stagelens.probes.sample import CollectorStatus, NodeSample
from stagelens.probes.sample_json import NodeSampleError

FRAME_VERSION = 1
# 5000-01-01: far past any recording, well inside what datetime can show
MAX_TIME_UNIX = 95_617_584_000


def busier_direction(link: PcieSample | NvlinkSample | None) -> float | None:
    """A link's use of its cap in its busier direction (tx or rx); None when neither was
    measured."""
    if link is None:
        return None
    known = [r for r in (link.tx_util_ratio, link.rx_util_ratio) if r is not None]
    return max(known) if known else None


class FrameError(ValueError):
    """A frame that cannot be read (wrong version, missing fields, a field of the wrong type)."""


@dataclass
class Frame:
    time_unix: float
    time_monotonic: float
    node: str
    node_sample: NodeSample | None = None   # the probe's sample, or None when not probed
    # the engine snapshot (stagelens-engine/1), or None without an engine
    engine: EngineSnapshot | None = None
    # how each collector fared this tick
    collectors: list[CollectorStatus] = field(default_factory=list)
    version: int = FRAME_VERSION

    def to_dict(self) -> dict:
        """The frame as JSON data. The node sample's JSON is made once and shared, not copied
        (its topology alone is tens of KB on an 8-GPU node): callers serialise the result, they
        do not change it."""
        return {"time_unix": self.time_unix, "time_monotonic": self.time_monotonic,
                "node": self.node,
                "node_sample": self.node_sample.to_dict() if self.node_sample is not None else None,
                "engine": self.engine.to_dict() if self.engine is not None else None,
                "collectors": [c.to_dict() for c in self.collectors], "version": self.version}

    @classmethod
    def from_dict(cls, data: dict) -> Frame:
        """A frame read back (a bundle, the HTTP API); FrameError naming the field that is not as
        written."""
        if not isinstance(data, dict):
            raise FrameError("a frame must be a JSON object")
        try:
            # a bundle's or a server's text: no terminal escape reaches a screen
            data = printable_data(data)
        except TooDeep as exc:
            raise FrameError(f"a frame {exc}") from None
        # True == 1 in Python
        if type(data.get("version")) is not int or data["version"] != FRAME_VERSION:
            raise FrameError(f"frame version {data.get('version')!r} is not {FRAME_VERSION}")
        missing = [k for k in ("time_unix", "time_monotonic", "node") if k not in data]
        if missing:
            raise FrameError(f"frame lacks {', '.join(missing)}")
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        _check_shape(known)
        if known.get("node_sample") is not None:
            known["node_sample"] = _read_node_sample(known["node_sample"])
        if known.get("engine") is not None:
            known["engine"] = _read_engine(known["engine"])
        if "collectors" in known:
            known["collectors"] = [_read_collector(c, i) for i, c in enumerate(known["collectors"])]
        return cls(**known)

    # --- convenient readers; None when the frame lacks the data -----------------------------------
    @property
    def window(self) -> Window | None:
        return self.engine.window if self.engine is not None else None

    def collector(self, name: str) -> CollectorStatus | None:
        """The named collector's status this tick (node, nvml, ..., engine); None when it did not
        run."""
        return next((c for c in self.collectors if c.name == name), None)

    def failed_collectors(self) -> list[CollectorStatus]:
        return [c for c in self.collectors if not c.success]

    def gpus(self) -> list[GpuSample]:
        """The GPUs that answered this tick (lost ones left out)."""
        if self.node_sample is None:
            return []
        return [g for g in self.node_sample.gpus if not g.lost]


def _check_shape(data: dict) -> None:
    """What the readers of a frame rely on without looking: finite times, objects where they
    index by key, lists where they iterate; the rest is left to its reader (the engine snapshot
    to its type's)."""
    for key in ("time_unix", "time_monotonic"):
        _check_number(data[key], key)
    if not 0 <= data["time_unix"] < MAX_TIME_UNIX:
        raise FrameError(f"time_unix: must be seconds since 1970 before the year 5000, got {shown(data['time_unix'])}")
    if not isinstance(data["node"], str):
        raise FrameError(f"node: must be a string, got {shown(data['node'])}")
    _check(data.get("node_sample"), "node_sample", dict, optional=True)
    _check(data.get("engine"), "engine", dict, optional=True)
    if "collectors" in data:
        _check_items(data["collectors"], "collectors")


def _read_node_sample(data: dict) -> NodeSample:
    """The typed sample, checked by probes.sample_json: its error named from the frame down."""
    try:
        return NodeSample.from_dict(data)
    except NodeSampleError as exc:
        raise FrameError(f"node_sample.{exc}") from None


def _read_engine(data: dict) -> EngineSnapshot:
    """The typed snapshot, checked by engine_hooks.records.snapshot: its error named from the
    frame down."""
    try:
        return EngineSnapshot.from_dict(data)
    except SnapshotError as exc:
        raise FrameError(f"engine.{exc}") from None


def _read_collector(data: dict, i: int) -> CollectorStatus:
    where = f"collectors[{i}]"
    _check(data.get("name"), f"{where}.name", str)
    if not isinstance(data.get("success"), bool):
        raise FrameError(f"{where}.success: must be true or false, got {shown(data.get('success'))}")
    duration = data.get("duration_seconds")
    if duration is not None:
        _check_number(duration, f"{where}.duration_seconds")
    error = data.get("error")
    _check(error, f"{where}.error", str, optional=True)
    return CollectorStatus(data["name"], data["success"], duration, error)


def _check(value, where: str, kind: type, optional: bool = False) -> None:
    if not (isinstance(value, kind) or (optional and value is None)):
        what = {dict: "an object", str: "a string", list: "a list"}[kind]
        raise FrameError(f"{where}: must be {what}{' or null' if optional else ''}, got {shown(value)}")


def _check_number(value, where: str) -> None:
    if not is_finite_number(value):
        raise FrameError(f"{where}: must be a finite number, got {shown(value)}")


def _check_items(value, where: str, optional: bool = False) -> None:
    """A list of objects (or null, where its readers take null for an empty list)."""
    _check(value, where, list, optional)
    for i, item in enumerate(value or []):
        _check(item, f"{where}[{i}]", dict)

