"""The kubelet's pod-resources API (`v1.PodResourcesLister/List` on a unix socket): the devices
(GPUs) the kubelet gave each pod on this node.

The messages are built at run time from a descriptor written here after the public podresources v1
API (k8s.io/kubelet/pkg/apis/podresources/v1), only the fields read: no generated code, no
Kubernetes client. A socket that is absent, refuses, times out or answers what does not parse is
one line of why, never an exception."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from stagelens.discovery.model import PodDevices

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
METHOD = "/v1.PodResourcesLister/List"
TIMEOUT_S = 5.0
MAX_RESPONSE_BYTES = 16 * 1024 * 1024     # a node's pods and their devices: far less
MAX_PODS = 1024

# (message, [(field, number, type, label, message type)]): the podresources v1 messages we read
_STRING, _INT64, _MESSAGE = 9, 3, 11
_OPTIONAL, _REPEATED = 1, 3
_MESSAGES: list[tuple[str, list[tuple[str, int, int, int, str | None]]]] = [
    ("ListPodResourcesRequest", []),
    ("ListPodResourcesResponse", [("pod_resources", 1, _MESSAGE, _REPEATED, "PodResources")]),
    ("PodResources", [("name", 1, _STRING, _OPTIONAL, None),
                      ("namespace", 2, _STRING, _OPTIONAL, None),
                      ("containers", 3, _MESSAGE, _REPEATED, "ContainerResources")]),
    ("ContainerResources", [("name", 1, _STRING, _OPTIONAL, None),
                            ("devices", 2, _MESSAGE, _REPEATED, "ContainerDevices"),
                            ("cpu_ids", 3, _INT64, _REPEATED, None)]),
    ("ContainerDevices", [("resource_name", 1, _STRING, _OPTIONAL, None),
                          ("device_ids", 2, _STRING, _REPEATED, None)]),
]


@dataclass
class PodResourcesAnswer:
    pods: list[PodDevices] = field(default_factory=list)
    error: str | None = None        # why no pods were read, one line


@cache
def message_classes() -> dict[str, Any]:
    """The request and response classes, from a FileDescriptorProto of package `v1`."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="kubelet_podresources_v1.proto", package="v1",
                                               syntax="proto3")
    for name, fields in _MESSAGES:
        message = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            added = message.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                added.type_name = f".v1.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{name}"))
            for name, _ in _MESSAGES}


def list_pod_resources(socket_path: str = DEFAULT_SOCKET,
                       timeout_s: float = TIMEOUT_S) -> PodResourcesAnswer:
    """The pods on this node with the devices each holds, or the line saying why not."""
    if not os.path.exists(socket_path):
        return PodResourcesAnswer(error=f"no kubelet pod-resources socket at {socket_path} (not on "
                                        "Kubernetes, or the socket is not mounted): pods not read")
    try:
        import grpc
    except ImportError:
        return PodResourcesAnswer(error="grpcio is not installed: pods not read")
    classes = message_classes()
    response_type = classes["ListPodResourcesResponse"]
    with grpc.insecure_channel(f"unix://{os.path.abspath(socket_path)}", options=[
            ("grpc.max_receive_message_length", MAX_RESPONSE_BYTES)]) as channel:
        call = channel.unary_unary(METHOD, request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=lambda raw: raw)
        try:
            raw = call(classes["ListPodResourcesRequest"](), timeout=timeout_s)
        except grpc.RpcError as exc:
            why = f"did not answer List: {_status(exc)}"
            said = f"the kubelet pod-resources socket {socket_path} {why}: pods not read"
            return PodResourcesAnswer(error=said)
    return parse_response(raw, response_type, socket_path)


def parse_response(raw: bytes, response_type: Any, socket_path: str) -> PodResourcesAnswer:
    """The pods of a List answer's bytes; what does not parse as one is said so."""
    from google.protobuf.message import DecodeError

    response = response_type()
    try:
        response.ParseFromString(raw)
    except (DecodeError, RuntimeError, ValueError) as exc:
        why = f"answered what is not a ListPodResourcesResponse ({len(raw)} bytes: {exc})"
        return PodResourcesAnswer(error=f"the kubelet pod-resources socket {socket_path} {why}: "
                                        "pods not read")
    answer = PodResourcesAnswer()
    for pod in list(response.pod_resources)[:MAX_PODS]:
        devices: dict[str, list[str]] = {}
        for container in pod.containers:
            for device in container.devices:
                devices.setdefault(device.resource_name, []).extend(device.device_ids)
        answer.pods.append(PodDevices(pod.namespace, pod.name, devices))
    return answer


def _status(exc: Any) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else None
    name = getattr(code, "name", "error")
    return f"{name}: {details}" if details else name
