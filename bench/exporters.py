"""Exporter costs: engine throughput with traces sent to a dead collector vs no exporter (A/B
interleaved), and the agent alone (`serve` on a DGX A100 snapshot, no engine): RSS, CPU, /metrics
latency, and whether torch was imported.

    python bench/exporters.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _report import emit  # noqa: E402  (bench/ is the script's own directory)

DGX = str(ROOT / "tests" / "fixtures" / "nvml" / "dgx_a100.json")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dead_collector(pairs: int, duration: float) -> dict:
    """The small engine in a closed loop, sampled every second, its timelines exported to a closed port."""
    import psutil

    from stagelens.engine_hooks.engine import EngineConfig
    from stagelens.lab.host import EngineHost
    from stagelens.lab.workload import LengthDist, WorkloadConfig
    from stagelens.sampler import Sampler
    from stagelens.tracing import TraceExporter

    dead = f"http://127.0.0.1:{_free_port()}"
    cfg = EngineConfig(model="small", device="cpu", max_num_seqs=16)
    workload = WorkloadConfig(rate=None, concurrency=16, prompt_len=LengthDist("uniform", 16, 64),
                              output_len=LengthDist("uniform", 8, 24), duration=duration, warmup=1.0)
    rates = {"off": [], "dead": []}
    host = EngineHost()
    sampler = Sampler(engine_source=host, interval=1.0)
    tracer = TraceExporter.from_env({"exporter": "otlp-http", "endpoint": dead, "max_queue_size": 2048,
                                     "export_timeout_s": 0.5})
    exporting = {"on": False}

    def export(_frame, timelines):
        if exporting["on"]:
            for t in timelines:
                tracer.export_timeline(t)

    sampler.listeners.append(export)
    process = psutil.Process()
    host.start(cfg)
    sampler.start()
    rss = [process.memory_info().rss]
    for i in range(pairs):
        for mode in (("off", "dead") if i % 2 == 0 else ("dead", "off")):
            exporting["on"] = mode == "dead"
            run = host.run(workload)
            rates[mode].append(run.window_tokens / run.window_s)
            rss.append(process.memory_info().rss)
    sampler.stop()
    host.stop()
    tracer.flush(1.0)
    stats = tracer.stats()
    tracer.shutdown(1.0)
    dropped, failed = stats["dropped"], stats["failed"]
    ratios = [d / o for d, o in zip(rates["dead"], rates["off"], strict=True)]
    return {"dead_collector_throughput_ratio": statistics.median(ratios),
            "dead_collector_throughput_ratio_min": min(ratios),
            "dead_collector_spans_dropped": dropped, "dead_collector_spans_failed": failed,
            "dead_collector_rss_growth_mb": (max(rss) - rss[1]) / 2**20}   # after the first run: bounded queue


def agent_alone(seconds: float, scrapes: int) -> dict:
    import psutil

    port = _free_port()
    stagelens = str(Path(sys.executable).parent / "stagelens")
    env = dict(os.environ, OTEL_TRACES_EXPORTER="none")
    proc = subprocess.Popen([stagelens, "--nvml-snapshot", DGX, "serve", "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(url + "/readyz", timeout=1).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("serve did not become ready")
            time.sleep(0.2)
        p = psutil.Process(proc.pid)
        cpu0, t0 = p.cpu_times(), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = p.cpu_times(), time.monotonic()
        cpu_ratio = ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / (t1 - t0)
        rss_mb = p.memory_info().rss / 2**20
        latencies = []
        for _ in range(scrapes):
            t = time.perf_counter()
            urllib.request.urlopen(url + "/metrics", timeout=5).read()
            latencies.append(time.perf_counter() - t)
        latencies.sort()
        first_render = []
        for _ in range(3):   # a scrape right after a new frame renders it afresh: the uncached cost
            time.sleep(1.05)
            t = time.perf_counter()
            urllib.request.urlopen(url + "/metrics", timeout=5).read()
            first_render.append(time.perf_counter() - t)
        maps = Path(f"/proc/{proc.pid}/maps").read_text() if Path(f"/proc/{proc.pid}/maps").exists() else ""
        return {"agent_rss_mb": rss_mb, "agent_cpu_ratio": cpu_ratio,
                "scrape_p50_ms": latencies[len(latencies) // 2] * 1000,
                "scrape_p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
                "scrape_after_new_frame_ms": statistics.median(first_render) * 1000,
                "torch_imported": "libtorch" in maps}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of about a minute")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = {}
    figures.update(agent_alone(10.0 if args.quick else 60.0, 1000))
    figures.update(dead_collector(3 if args.quick else 10, 5.0 if args.quick else 10.0))
    emit(figures, args.json)


if __name__ == "__main__":
    main()
