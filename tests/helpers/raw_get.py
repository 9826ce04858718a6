"""A GET over a raw socket whose answer is read in pieces and dropped: a client that costs itself nothing while
it makes a server send a long answer, and can stop reading (or leave) partway."""

from __future__ import annotations

import socket
from collections.abc import Callable


def get_dropping(port: int, path: str, read_at_most: int | None = None, receive_buffer: int | None = None,
                 then: Callable[[], object] | None = None) -> tuple[bytes, int]:
    """(head, bytes of answer read) of GET `path` on 127.0.0.1:`port`; after `read_at_most` bytes it stops
    reading, calls `then()` (holding the connection) and leaves."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        if receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data and (piece := sock.recv(65536)):
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        size = len(body)
        while read_at_most is None or size < read_at_most:
            piece = sock.recv(65536)
            if not piece:
                return head, size
            size += len(piece)
        if then is not None:
            then()
        return head, size
