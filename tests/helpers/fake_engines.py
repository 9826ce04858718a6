"""Processes that look like vLLM and SGLang servers to a process table: real Python processes run as
`python -m vllm.entrypoints.openai.api_server --port P ...` (or `sglang.launch_server`, or a
`stagelens` console script) from a package tree written under a test's tmp_path, each listening on
its --port (unless `--no-listen`) and sleeping until stopped. `--fork-listener` forks a child with the
same command line listening on a port of its own (vLLM's forked engine core and workers);
`--listen-in-child` has only that child listen on --port (an API server the parent starts).
`--serve-metrics FILE` answers /metrics on --port with FILE's text (a published capture)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

from tests.helpers.prometheus_support import free_port, stop_process

MODULES = {"vllm": "vllm.entrypoints.openai.api_server", "sglang": "sglang.launch_server"}
SCRIPT = '''
import os, socket, sys, time

args = sys.argv[1:]


def value(flag, default):
    return args[args.index(flag) + 1] if flag in args else default


def listen(host, port):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen()
    return s


host, port = value("--host", "0.0.0.0"), int(value("--port", "0"))
kept = []
if "--listen-in-child" in args or "--fork-listener" in args:
    read, write = os.pipe()
    if os.fork() == 0:
        kept.append(listen(host, port if "--listen-in-child" in args else 0))
        os.write(write, b"x")
        time.sleep(3600)
        os._exit(0)
    os.read(read, 1)    # ready once the child listens too
if "--no-listen" not in args and "--listen-in-child" not in args:
    kept.append(listen(host, port))
for extra in value("--also-listen", "").split(",") if "--also-listen" in args else []:
    kept.append(listen("127.0.0.1", int(extra)))
if "--serve-metrics" in args:
    # answer /metrics with a capture's text, as the engine would (kept[-1] is the --port socket)
    import http.server

    body = open(value("--serve-metrics", ""), "rb").read()

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer((host, port), Metrics, bind_and_activate=False)
    server.socket.close()
    server.socket = kept[-1]
    print("ready", flush=True)
    server.serve_forever()
print("ready", flush=True)
time.sleep(3600)
'''


def write_fakes(root: Path) -> Path:
    """The package tree (vllm/..., sglang/...) and a `stagelens` script under `root`; `root` returned."""
    for module in MODULES.values():
        parts = module.split(".")
        for i in range(1, len(parts)):
            package = root.joinpath(*parts[:i])
            package.mkdir(parents=True, exist_ok=True)
            (package / "__init__.py").touch()
        root.joinpath(*parts[:-1], parts[-1] + ".py").write_text(SCRIPT)
    (root / "bin").mkdir(exist_ok=True)
    (root / "bin" / "stagelens").write_text(SCRIPT)
    return root


class FakeEngines:
    """Starts fakes and stops every one it started (and their forked children)."""

    def __init__(self, root: Path) -> None:
        self.root = write_fakes(root)
        self.started: list[subprocess.Popen] = []

    def start(self, kind: str, *args: str, env: dict | None = None, wait: bool = True) -> subprocess.Popen:
        """`kind` vllm, sglang or stagelens (the agent's console script) with `args`; started once
        it printed `ready` (listening), unless `wait` is False."""
        program = [str(self.root / "bin" / "stagelens")] if kind == "stagelens" else ["-m", MODULES[kind]]
        clean = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "HOSTNAME")}
        process = subprocess.Popen([sys.executable, "-S", *program, *args], stdout=subprocess.PIPE,
                                   env={**clean, "PYTHONPATH": str(self.root), **(env or {})},
                                   start_new_session=True, text=True)
        self.started.append(process)
        if wait:
            line = process.stdout.readline() if process.stdout else ""
            assert line.strip() == "ready", f"fake {kind} {args} did not start"
        return process

    def stop(self, process: subprocess.Popen) -> None:
        for child in _children(process.pid):
            child.kill()
        stop_process(process, grace_s=5)
        if process.stdout:
            process.stdout.close()

    def processes(self) -> list[psutil.Process]:
        """The fakes still running and their children: what a narrowed scan looks at."""
        found = []
        for process in self.started:
            if process.poll() is None:
                found.append(psutil.Process(process.pid))
                found += _children(process.pid)
        return found

    def stop_all(self) -> None:
        for process in self.started:
            self.stop(process)


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


__all__ = ["FakeEngines", "free_port"]
