"""OTLP/gRPC `TraceService/Export` for the OtlpReceiver (receiver.py), which it knows as its intake
(intake.py).

On gRPC's asyncio server, in a thread of its own: a call waiting for its request costs a coroutine,
not one of four worker threads (four Exports that never sent their message blocked all intake). Each
call must deliver its one message within `read_timeout_s` (else DEADLINE_EXCEEDED), at most
`MAX_CALLS` are served at once (more: RESOURCE_EXHAUSTED, as gRPC answers), and the decoding runs on
a small thread pool so the event loop keeps taking calls. The port is bound without SO_REUSEPORT: a
second agent on the same port fails to start instead of silently taking half of the spans.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent import futures

from stagelens.engine_hooks.shared.fair_share import FairShare, grpc_peer_key
from stagelens.sources.otlp.decode import PROTOBUF, RequestRejected, one_line
from stagelens.sources.otlp.intake import SpanIntake

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
# served at once (each ~10 MB while its 4 MiB message is taken), 3/4 of them for one host; a stalled
# one holds a slot for read_timeout_s at most
MAX_CALLS = 6
# gRPC's own bound, past which it answers RESOURCE_EXHAUSTED: the calls over MAX_CALLS are answered
# UNAVAILABLE at once, before their message is read
MAX_OPEN_CALLS = 64
RETRY_AFTER_S = 1
DECODE_THREADS = 2
EMPTY_RESPONSE = b""        # an ExportTraceServiceResponse with nothing in it, serialized


class GrpcIntake:
    def __init__(self, intake: SpanIntake, host: str, port: int) -> None:
        self.intake = intake
        self.address = f"{host}:{port}"
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server = None
        self._pool: futures.ThreadPoolExecutor | None = None
        self.calls = FairShare(MAX_CALLS)

    def start(self) -> int:
        """Binds and serves; the bound port. OSError when the address cannot be listened on."""
        self._loop = asyncio.new_event_loop()
        self._pool = futures.ThreadPoolExecutor(max_workers=DECODE_THREADS,
                                                thread_name_prefix="otlp-grpc-decode")
        self._thread = threading.Thread(target=self._loop.run_forever, name="otlp-grpc", daemon=True)
        self._thread.start()
        try:
            self.port = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=30)
        except BaseException:
            self.stop()
            raise
        return self.port

    async def _serve(self) -> int:
        import grpc

        server = grpc.aio.server(maximum_concurrent_rpcs=MAX_OPEN_CALLS, options=[
            ("grpc.max_receive_message_length", self.intake.max_body_bytes),
            ("grpc.so_reuseport", 0)])
        # a stream of bytes in (no deserializer): the call's messages are read here, under a
        # deadline, and the very bytes received are what is decoded and forwarded
        handler = grpc.stream_unary_rpc_method_handler(self._export)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
        try:
            bound = server.add_insecure_port(self.address)
        except RuntimeError:                   # grpc's "Failed to bind"
            bound = 0
        if not bound:
            await server.stop(None)
            raise OSError(f"cannot listen for OTLP/gRPC on {self.address}: the address is in use or not this "
                          "host's")
        await server.start()
        self._server = server
        return bound

    async def _export(self, messages, context) -> bytes:
        peer = grpc_peer_key(context.peer())
        busy = self.calls.take(peer)
        if busy is None:
            try:
                failure = await self._refusal(messages, peer)
            finally:
                self.calls.give(peer)
        else:
            self.intake.count("received_requests")
            self.intake.count(busy)
            self.intake.count("rejected")
            whose = "this host's share of " if busy == "busy_peer" else ""
            failure = _retry_later(f"busy: {whose}{MAX_CALLS} calls already in flight; retry")
        if failure is not None:
            # aborted here, not inside an `except`: an exception raised while another is handled
            # keeps that one, its traceback and the frames holding the 4 MiB body alive until the
            # cycle collector runs (RSS grew call after call)
            await context.abort(*failure)
        return EMPTY_RESPONSE

    async def _refusal(self, messages, peer: str) -> tuple | None:
        """Receives and ingests the call's message; None when accepted, else `context.abort`'s
        arguments."""
        import grpc

        intake = self.intake
        body: bytes | None      # dropped once decoded
        try:
            body = await asyncio.wait_for(_one_message(messages), intake.read_timeout_s)
        except TimeoutError:
            intake.count("received_requests")
            intake.rejected(RequestRejected(408, "stalled"))
            return (grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"the request was not received within {intake.read_timeout_s:g} s")
        except RequestRejected as e:
            intake.count("received_requests")
            intake.rejected(e)
            return grpc.StatusCode.INVALID_ARGUMENT, e.reason
        size = len(body)
        try:
            # the byte budget HTTP bodies share, until it is decoded
            intake.hold_bytes(peer, size)
        except RequestRejected as e:
            intake.count("received_requests")
            intake.rejected(e)
            return _retry_later(e.reason)
        try:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._pool, intake.ingest, body, PROTOBUF)
        except RequestRejected as e:
            return (grpc.StatusCode.RESOURCE_EXHAUSTED if e.status == 413 else grpc.StatusCode.INVALID_ARGUMENT,
                    e.reason)
        except Exception as e:                 # never a traceback, nor UNKNOWN, to the engine
            log.warning("OTLP/gRPC request failed: %s: %s", type(e).__name__, one_line(e))
            return grpc.StatusCode.INTERNAL, f"internal error: {one_line(e)}"
        finally:
            body = None
            intake.bodies.give(peer, size)
        return None

    def stop(self) -> None:
        loop, server = self._loop, self._server
        self._server = None
        if loop is not None and server is not None:
            try:
                asyncio.run_coroutine_threadsafe(server.stop(0.5), loop).result(timeout=5)
            except (futures.TimeoutError, RuntimeError):
                log.debug("the OTLP/gRPC server did not stop in time")
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if loop is not None and not loop.is_running():
            loop.close()
        self._loop = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _retry_later(reason: str) -> tuple:
    """`context.abort`'s arguments for a refusal to retry: UNAVAILABLE with a RetryInfo, both in
    the status details (as gRPC defines them) and under the key OTel's Python exporter reads."""
    import grpc
    from google.protobuf import any_pb2
    from google.rpc import error_details_pb2, status_pb2

    retry = error_details_pb2.RetryInfo()
    retry.retry_delay.seconds = RETRY_AFTER_S
    detail = any_pb2.Any()
    detail.Pack(retry)
    status = status_pb2.Status(code=grpc.StatusCode.UNAVAILABLE.value[0], message=reason,
                               details=[detail])
    return (grpc.StatusCode.UNAVAILABLE, reason,
            (("grpc-status-details-bin", status.SerializeToString()),
             ("google.rpc.retryinfo-bin", retry.SerializeToString())))


async def _one_message(messages) -> bytes:
    """Export's one request message; RequestRejected for none or several."""
    body = None
    async for message in messages:
        if body is not None:
            raise RequestRejected(400, "Export takes one request message, not a stream of them")
        body = message
    if body is None:
        raise RequestRejected(400, "the call ended without a request message")
    return body
