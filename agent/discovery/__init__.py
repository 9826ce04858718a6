"""Discovery: the vLLM and SGLang servers on this node, from its processes (command lines,
LISTEN sockets, CUDA_VISIBLE_DEVICES) and the kubelet's pod resources, refreshed and followed
across restarts ([docs/discovery.md](../../docs/discovery.md)).

`Discovery().refresh()` answers a `DiscoveryReport`: `engines` (`DiscoveredEngine`: name, kind,
url, pid, gpus, how it was found), `pods`, `notes`, `left_out`."""

from stagelens.discovery.model import MAX_ENGINES, DiscoveredEngine, DiscoveryReport, PodDevices
from stagelens.discovery.tracker import Discovery

__all__ = ["MAX_ENGINES", "DiscoveredEngine", "Discovery", "DiscoveryReport", "PodDevices",
           "discover"]


def discover(pod_resources_socket: str | None = None) -> DiscoveryReport:
    """One scan of this node, nothing followed (the `stagelens engines` command)."""
    from stagelens.discovery.pod_resources import DEFAULT_SOCKET

    return Discovery(pod_resources_socket or DEFAULT_SOCKET).refresh()
