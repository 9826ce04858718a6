"""Running the HTTP server: bounded (connections, the time to read a request) and stopped
gracefully.

SIGTERM and SIGINT start a graceful stop: no new connections, and the hosted engine gives requests
in flight `grace_s` to finish, then aborts the rest, so every client gets an answer (503 or an error
event) before uvicorn would cancel its task. Then the runtime stops (traces drained, NVML closed)
and the process exits 0. A second SIGINT forces the stop.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading

import uvicorn

from stagelens.errors import UserError
from stagelens.server.limits import BoundedH11Protocol

SIGNALS = (signal.SIGINT, signal.SIGTERM)


CANCEL_AFTER_GRACE_S = 3.0    # uvicorn cancels what still runs this long after the engine's grace


class _GracefulServer(uvicorn.Server):
    """uvicorn re-raises a caught signal once it has stopped, with the default handler back in
    place: the process would die before the runtime is stopped. Here a signal only starts the
    shutdown."""

    def __init__(self, config, on_exit) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig, frame) -> None:
        if not self.should_exit:
            threading.Thread(target=self._on_exit, name="stagelens-drain", daemon=True).start()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def listen_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound now, so a busy port or unknown host is a one-line error."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, UnicodeError) as exc:
        raise UserError(f"--listen {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UserError(f"--listen {host}:{port}: cannot listen there: {exc.strerror or exc}") from None
    return sock


def serve_until_stopped(app, sock: socket.socket, runtime, grace_s: float, max_connections: int) -> None:
    config = uvicorn.Config(app, log_level="warning", http=BoundedH11Protocol, lifespan="off",
                            limit_concurrency=max_connections,
                            timeout_graceful_shutdown=round(grace_s + CANCEL_AFTER_GRACE_S))
    server = _GracefulServer(config, lambda: runtime.lab and runtime.lab.stop(grace_s))
    stopping = {sig: signal.getsignal(sig) for sig in SIGNALS}
    try:
        server.run(sockets=[sock])
    finally:
        # The HTTP side is done; a signal while the runtime stops must not interrupt the drain.
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
        try:
            runtime.stop()
        finally:
            if threading.current_thread() is threading.main_thread():
                for sig, handler in stopping.items():
                    signal.signal(sig, handler)
