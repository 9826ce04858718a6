"""A second sending host on one machine: 127.0.0.2 (all of 127/8 is this machine's loopback), so the
intake's per-host fair share can be seen from a test as it works on a real network."""

from __future__ import annotations

import contextlib
import socket
import threading

SECOND_HOST = "127.0.0.2"


def connect_from(source: str, port: int, timeout: float) -> socket.socket:
    """A connection to 127.0.0.1:port from the address `source`."""
    return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))


class Relay:
    """Listens on 127.0.0.1 and carries every connection on to 127.0.0.1:`port` from `source`: for clients
    (gRPC channels) that cannot choose their source address."""

    def __init__(self, port: int, source: str = SECOND_HOST) -> None:
        self.port, self.source = port, source
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = connect_from(self.source, self.port, timeout=5.0)
            except OSError:
                return
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
