"""The kubelet's pod-resources List against real gRPC servers on a unix socket: one answering a real
ListPodResourcesResponse (encoded here by hand, field by field, not with the code under test), one
answering bytes that are no such message, a socket that speaks no gRPC at all, and none."""

from __future__ import annotations

import socket
import threading
from concurrent import futures

import grpc
import pytest

from stagelens.discovery import Discovery
from stagelens.discovery.pod_resources import list_pod_resources
from tests.helpers.fake_engines import FakeEngines, free_port


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def _field(number: int, payload: bytes | str) -> bytes:
    """A length-delimited field (a string or an embedded message) on the protobuf wire."""
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _pod(namespace: str, name: str, devices: dict[str, list[str]]) -> bytes:
    container_devices = b"".join(_field(2, _field(1, r) + b"".join(_field(2, i) for i in ids))
                                 for r, ids in devices.items())
    container = _field(1, "engine") + container_devices + _varint(3 << 3 | 0) + _varint(7)   # cpu_ids: 7
    return _field(1, name) + _field(2, namespace) + _field(3, container)


REAL_ANSWER = (_field(1, _pod("serving", "vllm-a", {"nvidia.com/gpu": ["GPU-aaa", "GPU-bbb"]}))
               + _field(1, _pod("kube-system", "coredns", {}))
               + _field(1, _pod("serving", "vllm-b", {"nvidia.com/gpu": ["GPU-ccc"]})))


@pytest.fixture
def kubelet(tmp_path):
    """start(answer): a gRPC server on tmp_path/k.sock answering List with the bytes `answer`."""
    servers = []

    def start(answer: bytes) -> str:
        path = str(tmp_path / "k.sock")
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.unary_unary_rpc_method_handler(lambda request, context: answer,
                                                      request_deserializer=lambda raw: raw,
                                                      response_serializer=lambda raw: raw)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", {"List": handler}),))
        server.add_insecure_port(f"unix://{path}")
        server.start()
        servers.append(server)
        return path

    yield start
    for server in servers:
        server.stop(grace=None)


def test_a_real_answer_gives_each_pod_its_devices(kubelet):
    answer = list_pod_resources(kubelet(REAL_ANSWER))
    assert answer.error is None
    assert [(p.pod, p.devices) for p in answer.pods] == [
        ("serving/vllm-a", {"nvidia.com/gpu": ["GPU-aaa", "GPU-bbb"]}), ("kube-system/coredns", {}),
        ("serving/vllm-b", {"nvidia.com/gpu": ["GPU-ccc"]})]


def test_an_answer_that_is_no_such_message_is_a_clear_line(kubelet):
    path = kubelet(b"\x0a\xff\xff\xff\xff garbage")
    answer = list_pod_resources(path)
    assert answer.pods == []
    assert answer.error.startswith(f"the kubelet pod-resources socket {path} answered what is not a "
                                   "ListPodResourcesResponse")


def test_a_socket_that_speaks_no_grpc_is_a_clear_line(tmp_path):
    path = str(tmp_path / "g.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    stop = threading.Event()

    def garbage() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nnot grpc\x00\xff" * 4)

    thread = threading.Thread(target=garbage, daemon=True)
    thread.start()
    try:
        answer = list_pod_resources(path, timeout_s=10)
    finally:
        stop.set()
        thread.join(timeout=10)
        listener.close()
    assert answer.pods == []
    assert answer.error.startswith(f"the kubelet pod-resources socket {path} did not answer List: ")


def test_no_socket_is_a_clear_line_in_the_report(tmp_path):
    report = Discovery(str(tmp_path / "absent.sock"), processes=lambda: []).refresh()
    assert report.notes == [f"no kubelet pod-resources socket at {tmp_path / 'absent.sock'} "
                            "(not on Kubernetes, or the socket is not mounted): pods not read"]


def test_an_engine_in_a_pod_gets_the_pods_devices(kubelet, tmp_path):
    """A pod's processes have its name as HOSTNAME: the engine is joined to the pod the kubelet says
    holds GPU-aaa and GPU-bbb."""
    path = kubelet(REAL_ANSWER)
    fakes = FakeEngines(tmp_path / "fakes")
    try:
        engine = fakes.start("vllm", "--port", str(free_port()), env={"HOSTNAME": "vllm-a"})
        report = Discovery(path, processes=fakes.processes).refresh()
    finally:
        fakes.stop_all()
    found = next(e for e in report.engines if e.pid == engine.pid)
    assert found.pod == "serving/vllm-a" and found.pod_devices == {"nvidia.com/gpu": ["GPU-aaa", "GPU-bbb"]}
    assert [p.pod for p in report.pods] == ["serving/vllm-a", "serving/vllm-b"]     # those holding devices
    assert report.notes == []
