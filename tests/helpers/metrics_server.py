"""A loopback HTTP server that answers /metrics as an engine does: for the engine sources read from outside."""

import contextlib
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class MetricsServer:
    """Serves `body` on /metrics after `delay_s`; `body` is the text, or what makes it at each request (a
    capture whose counters advance with time)."""

    def __init__(self, body: str | Callable[[], str] = "", delay_s: float = 0.0) -> None:
        self.body, self.delay_s = body, delay_s
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                time.sleep(engine.delay_s)
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = engine.body() if callable(engine.body) else engine.body
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):   # the source gave up, rightly
                    self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
