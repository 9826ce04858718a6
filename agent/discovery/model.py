"""What discovery found: each engine (`DiscoveredEngine`), each Kubernetes pod holding devices
(`PodDevices`), and one report of a scan (`DiscoveryReport`), all JSON both ways."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS = ("vllm", "sglang")
MAX_ENGINES = 64


@dataclass
class DiscoveredEngine:
    """One serving engine found on this node.

    `name` stays the same across refreshes (the served model's name, else KIND-PORT at first sight);
    `gpus` is the process's CUDA_VISIBLE_DEVICES as a list, None when unset or not readable (a note
    says which); `how` says how it was found, one line; `pod` is NAMESPACE/NAME when a pod holds
    it."""

    name: str
    kind: str
    url: str
    pid: int | None
    command: str
    model: str | None = None
    gpus: list[str] | None = None
    how: str = ""
    notes: list[str] = field(default_factory=list)
    pod: str | None = None
    pod_devices: dict[str, list[str]] | None = None

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "url": self.url, "pid": self.pid,
                "command": self.command, "model": self.model, "gpus": self.gpus, "how": self.how,
                "notes": list(self.notes), "pod": self.pod, "pod_devices": self.pod_devices}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiscoveredEngine:
        """Read back; ValueError naming the field that is wrong."""
        if not isinstance(data, dict):
            raise ValueError("engine: not an object")
        kind = _text(data, "kind")
        if kind not in KINDS:
            raise ValueError(f"engine.kind: {kind!r} is not one of {', '.join(KINDS)}")
        url = _text(data, "url")
        if not url.startswith("http://") or not url.rsplit(":", 1)[1].isdigit():
            raise ValueError(f"engine.url: {url!r} is not http://HOST:PORT")
        pid = data.get("pid")
        if pid is not None and (not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0):
            raise ValueError(f"engine.pid: {pid!r} is not a process id")
        return cls(name=_text(data, "name"), kind=kind, url=url, pid=pid,
                   command=_text(data, "command"), model=_text(data, "model", optional=True),
                   gpus=_texts(data, "gpus"), how=_text(data, "how"),
                   notes=_texts(data, "notes") or [], pod=_text(data, "pod", optional=True),
                   pod_devices=_devices(data.get("pod_devices")))


@dataclass
class PodDevices:
    """A pod on this node and the devices the kubelet gave each of its containers."""

    namespace: str
    name: str
    devices: dict[str, list[str]]       # resource name (nvidia.com/gpu) -> device ids

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "devices": self.devices}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PodDevices:
        if not isinstance(data, dict):
            raise ValueError("pod: not an object")
        return cls(_text(data, "namespace"), _text(data, "name"),
                   _devices(data.get("devices")) or {})


@dataclass
class DiscoveryReport:
    """One scan: the engines (at most MAX_ENGINES), the pods holding devices, what was said once
    (unreadable processes, merged URLs, engines gone or replaced), and how many were left out."""

    engines: list[DiscoveredEngine] = field(default_factory=list)
    pods: list[PodDevices] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    left_out: int = 0
    scanned: int = 0        # processes looked at

    def engine(self, name: str) -> DiscoveredEngine | None:
        return next((e for e in self.engines if e.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"engines": [e.to_dict() for e in self.engines],
                "pods": [p.to_dict() for p in self.pods],
                "notes": list(self.notes), "left_out": self.left_out, "scanned": self.scanned}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiscoveryReport:
        if not isinstance(data, dict):
            raise ValueError("discovery: not an object")
        engines, pods = data.get("engines", []), data.get("pods", [])
        if not isinstance(engines, list) or not isinstance(pods, list):
            raise ValueError("discovery.engines and discovery.pods are lists")
        left_out, scanned = data.get("left_out", 0), data.get("scanned", 0)
        for key, value in (("left_out", left_out), ("scanned", scanned)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"discovery.{key}: {value!r} is not a count")
        return cls([DiscoveredEngine.from_dict(e) for e in engines],
                   [PodDevices.from_dict(p) for p in pods],
                   _texts(data, "notes") or [], left_out, scanned)


def _text(data: dict, key: str, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValueError(f"engine.{key}: {value!r} is not text")
    return value


def _texts(data: dict, key: str) -> list[str] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key}: {value!r} is not a list of text")
    return list(value)


def _devices(value: Any) -> dict[str, list[str]] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(i, str) for i in v)
            for k, v in value.items()):
        raise ValueError(f"devices: {value!r} is not resource -> [device id]")
    return {k: list(v) for k, v in value.items()}
