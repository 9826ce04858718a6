"""`Frame`: one sampling tick — the node sample, the engine snapshot and how each collector fared.

The sampler makes frames; diagnosis, the Prometheus collector, the HTTP API, the TUI and
record/replay all read them. Plain data, JSON-serialisable, versioned.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

FRAME_VERSION = 1


def busier_direction(link: dict | None) -> float | None:
    """A link's use of its cap in its busier direction (tx or rx); None when neither was measured."""
    known = [link[k] for k in ("tx_util_ratio", "rx_util_ratio") if link and link.get(k) is not None]
    return max(known) if known else None


class FrameError(ValueError):
    """A frame that cannot be read (wrong version, missing fields)."""


@dataclass
class Frame:
    time_unix: float
    time_monotonic: float
    node: str
    node_sample: dict | None = None       # probes.sample.NodeSample.to_dict(), or None when not probed
    engine: dict | None = None            # the engine snapshot (stagelens-engine/1), or None without an engine
    collectors: list[dict] = field(default_factory=list)   # {name, success, duration_seconds, error}
    version: int = FRAME_VERSION

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Frame:
        if not isinstance(data, dict):
            raise FrameError("a frame must be a JSON object")
        if data.get("version") != FRAME_VERSION:
            raise FrameError(f"frame version {data.get('version')!r} is not {FRAME_VERSION}")
        missing = [k for k in ("time_unix", "time_monotonic", "node") if k not in data]
        if missing:
            raise FrameError(f"frame lacks {', '.join(missing)}")
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    # --- convenient readers; None when the frame lacks the data -------------------------------------
    @property
    def window(self) -> dict | None:
        return self.engine.get("window") if self.engine else None

    def gpus(self) -> list[dict]:
        if not self.node_sample:
            return []
        return [g for g in self.node_sample.get("gpus", []) if not g.get("lost")]
