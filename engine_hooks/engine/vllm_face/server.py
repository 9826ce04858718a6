"""A registry's Prometheus exposition at `/metrics`, on a port of its own, as vLLM's API server
serves it.

`MetricsServer(registry, host, port).start()` binds (port 0 picks a free one), serves on a daemon
thread, and `stop()` shuts the listener, closes the socket and joins the thread. Only `GET /metrics`
(and `HEAD`) answer 200; any other path is 404. The listener has the agent's bounds
(engine_hooks/shared/bounded_http.py): a connection cap, a deadline on each request's headers, and a
client that leaves before reading its answer counted (`clients_gone`), not a traceback.
"""

from __future__ import annotations

import threading

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from stagelens.engine_hooks.shared.bounded_http import (
    MAX_CONNECTIONS,
    REQUEST_READ_TIMEOUT_S,
    BoundedHandler,
    BoundedHTTPServer,
)

METRICS_PATH = "/metrics"


class _Server(BoundedHTTPServer):
    block_on_close = True

    def __init__(self, address, registry: CollectorRegistry, **bounds) -> None:
        self.registry = registry
        super().__init__(address, _Handler, **bounds)


class _Handler(BoundedHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._answer(with_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(with_body=False)

    def _answer(self, with_body: bool) -> None:
        if self.path.split("?", 1)[0] != METRICS_PATH:
            body, status, content_type = b"not found\n", 404, "text/plain; charset=utf-8"
        else:
            body, status, content_type = generate_latest(self.server.registry), 200, CONTENT_TYPE_LATEST
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def log_message(self, format, *args) -> None:  # noqa: A002 (http.server's signature)
        pass              # a scrape every few seconds is not worth a log line


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0, *,
                 max_connections: int = MAX_CONNECTIONS,
                 request_read_timeout_s: float = REQUEST_READ_TIMEOUT_S) -> None:
        self.registry = registry
        self._bounds = {"max_connections": max_connections,
                        "request_read_timeout_s": request_read_timeout_s}
        self.host = host
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._gone = 0

    @property
    def clients_gone(self) -> int:
        """Clients that left before reading their answer (a scraper's timeout): counted, never
        logged."""
        return self._server.clients_gone if self._server is not None else self._gone

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> MetricsServer:
        if self._server is not None:
            raise RuntimeError("the metrics server is already started")
        self._server = _Server((self.host, self.port), self.registry, **self._bounds)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1}, name="vllm-face-metrics",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.close_connections()
        self._gone = server.clients_gone
        if thread is not None:
            thread.join(timeout=10)
