"""Loopback servers that misbehave on purpose: each connection runs a script written byte by byte, so a test can
drip an answer, redirect, or check what the agent sent, as a hostile engine (or Prometheus) would."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class ScriptedServer:
    """Runs `script(server, conn)` on its own thread for every connection to 127.0.0.1:`port`."""

    def __init__(self, script) -> None:
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.heads: list[bytes] = []      # the request heads read so far, in order
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            self.script(self, conn)

    def read_head(self, conn: socket.socket) -> bytes:
        """The request's head, and its body (by Content-Length) read off the socket too: a reply to a request
        left half read could be reset before the client reads it."""
        data = b""
        conn.settimeout(10)
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length and (chunk := conn.recv(65536)):
            body += chunk
        self.heads.append(head)
        return head

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)   # wakes the accepting thread: nothing listens from now on
        self.listener.close()

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def answer(conn: socket.socket, body: bytes | str = b"", status: str = "200 OK", headers: dict | None = None) -> None:
    data = body.encode() if isinstance(body, str) else body
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(data)}", "Connection: close",
             *(f"{k}: {v}" for k, v in (headers or {}).items())]
    conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data)


def drip(server: ScriptedServer, conn: socket.socket, data: bytes, every_s: float = 0.2, for_s: float = 40.0) -> None:
    """Send `data` (repeated) one byte every `every_s`, for at most `for_s` seconds or until the reader leaves."""
    end = time.monotonic() + for_s
    at = 0
    while time.monotonic() < end and not server.closed.is_set():
        conn.sendall(data[at % len(data):at % len(data) + 1])
        at += 1
        time.sleep(every_s)


def drip_body(server: ScriptedServer, conn: socket.socket) -> None:
    """Headers at once, then a body of a byte every 0.2 s: each read finishes long before a socket timeout."""
    server.read_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n")
    drip(server, conn, b"# dripping\n")


def drip_headers(server: ScriptedServer, conn: socket.socket) -> None:
    """A status line, then a header a byte every 0.2 s, never ending."""
    server.read_head(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    drip(server, conn, b"X-Slow: " + b"a" * 200 + b"\r\n")


def endless_chunked(chunk: bytes = b"# endless\n", every_s: float = 0.0, per_write: int = 1000):
    """A script: headers at once, then a chunked body that never ends, `per_write` chunks of `chunk` a write
    every `every_s` (0: as fast as the reader takes them), until the reader leaves or the server closes."""
    frame = b"%x\r\n" % len(chunk) + chunk + b"\r\n"

    def script(server: ScriptedServer, conn: socket.socket) -> None:
        server.read_head(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        while not server.closed.is_set():
            conn.sendall(frame * per_write)
            if every_s:
                time.sleep(every_s)
    return script
