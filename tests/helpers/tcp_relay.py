"""A loopback TCP relay that can be frozen: a server that has stopped answering, without stopping the server.

While frozen it still accepts connections (as the kernel does for a stopped process) but forwards no byte either
way until thawed. Signals (SIGSTOP) would do the same to the real server, but not on every kernel a CI runs on.
"""

from __future__ import annotations

import socket
import threading


class FreezableRelay:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thawed = threading.Event()
        self.thawed.set()
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self.thawed.clear()

    def thaw(self) -> None:
        self.thawed.set()

    def close(self) -> None:
        self.thawed.set()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:   # closed
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        self.thawed.wait()
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30)
        except OSError:
            client.close()
            return
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        back.start()
        _pump(client, upstream)
        back.join(30)
        client.close()
        upstream.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` ends, then end `sink`'s writing side; a peer gone ends the copy."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
