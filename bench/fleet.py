"""The fleet view's cost against a big fleet: N nodes' stagelens series over the last hour at 15 s steps
(OpenMetrics, backfilled with `promtool tsdb create-blocks-from openmetrics` into a fresh TSDB), a real
Prometheus on it, and `FleetQuery.fetch()` every 5 s for a minute: series and bytes of each answer, refresh time
(p50, p99), and the CPU share of the process that refreshes. Figures only, never pass/fail.

The data runs on a few minutes past now (samples ahead of the query time are not read), so every refresh sees
fresh frames however long the backfill takes. Nodes: stage states that change now and then (a Markov chain a
stage, seeded), every 50th node firing throughout, a few down for the last ten minutes, a few with a collector
failing; each with all fourteen signals' state and value, five collectors and the TTFT and latency tails' shares.

    python bench/fleet.py [--nodes N] [--quick] [--json]      (--quick: 200 nodes, 20 s)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _report import emit, free_port  # noqa: E402  (bench/ is the script's own directory)

STEP_S = 15
HISTORY_S = 3600
AHEAD_S = 600            # data past now: the backfill and the run fit in it
COLLECTORS = ("nvml", "topology", "links", "host", "engine")
TAIL_PARTS = ("kv_cache", "scheduler", "cold_path", "compute")
VALUE = {"unknown": -1, "ok": 0, "warn": 1, "firing": 2}


class Node:
    """One node's states at every step: a Markov chain a stage; its first signal follows the stage's state."""

    def __init__(self, index: int, steps: int, rng: random.Random) -> None:
        from stagelens.vocabulary import STAGES

        self.instance = f"node-{index:05d}:9400"
        self.labels = f'cluster="c{index % 4}",gpu="{("h100", "a100")[index % 2]}",instance="{self.instance}",' \
                      'job="stagelens"'
        self.down_from = steps - (AHEAD_S + 600) // STEP_S if index % 333 == 7 else steps   # down the last 10 min
        self.failing = "nvml" if index % 97 == 3 else None
        always = STAGES[(index // 50) % 3] if index % 50 == 0 else None
        self.states: dict[str, list[str]] = {}
        self.since: dict[str, list[int]] = {}
        for stage in STAGES:
            state, since, states, sinces = "ok", 0, [], []
            for step in range(steps):
                before = state
                if stage == always:
                    state = "firing"
                else:
                    roll = rng.random()
                    if state == "ok" and roll < 0.0015:
                        state = "warn"
                    elif state == "warn":
                        state = "firing" if roll < 0.08 else "ok" if roll < 0.16 else "warn"
                    elif state == "firing" and roll < 0.05:
                        state = "ok"
                if state != before or step == 0:
                    since = step
                states.append(state)
                sinces.append(since)
            self.states[stage], self.since[stage] = states, sinces

    def state(self, stage: str, step: int) -> str:
        return self.states[stage][step]


def write_openmetrics(path: Path, nodes: list[Node], start: int, steps: int) -> int:
    """The nodes' series, one family after another (as OpenMetrics wants), each series in time order; the
    number of samples written."""
    from stagelens.diagnosis.signals import SIGNALS
    from stagelens.vocabulary import STAGES

    times = [start + i * STEP_S for i in range(steps)]
    first_signal = {stage: next(s.id for s in SIGNALS if s.stage == stage) for stage in STAGES}
    count = 0
    with open(path, "w", buffering=4 * 2**20) as out:
        def family(name: str, help_: str, series) -> None:
            """series: (label text, value of step, first step, last step + 1)."""
            nonlocal count
            out.write(f"# HELP {name} {help_}\n# TYPE {name} gauge\n")
            for labels, value_of, begin, end in series:
                head = f"{name}{{{labels}}} "
                out.writelines(f"{head}{value_of(i)} {times[i]}\n" for i in range(begin, end))
                count += end - begin

        def verdict(node: Node, i: int) -> int:
            return max(VALUE[node.state(s, i)] for s in STAGES)

        family("up", "1 when the scrape succeeded.", ((n.labels, (lambda i, n=n: int(i < n.down_from)), 0, steps)
                                                      for n in nodes))
        family("stagelens_diagnosis_verdict_state", "The worst stage state.",
               ((n.labels, (lambda i, n=n: verdict(n, i)), 0, n.down_from) for n in nodes))
        family("stagelens_frame_timestamp_seconds", "When the frame was sampled.",
               ((n.labels, (lambda i: times[i] - 1), 0, n.down_from) for n in nodes))
        family("stagelens_stage_state", "State of the bottleneck stage.",
               ((f'{n.labels},stage="{s}"', (lambda i, n=n, s=s: VALUE[n.state(s, i)]), 0, n.down_from)
                for n in nodes for s in STAGES))
        family("stagelens_stage_state_since_timestamp_seconds", "When the stage entered its current state.",
               ((f'{n.labels},stage="{s}"', (lambda i, n=n, s=s: times[n.since[s][i]]), 0, n.down_from)
                for n in nodes for s in STAGES))
        # the root: written only at the steps a stage is warn or firing (a gap is what a scrape without it gives)
        out.write("# HELP stagelens_root_stage_info The root stage.\n# TYPE stagelens_root_stage_info gauge\n")
        for n in nodes:
            for s in STAGES:
                lines = [f'stagelens_root_stage_info{{{n.labels},stage="{s}"}} 1 {times[i]}\n'
                         for i in range(n.down_from)
                         if max(STAGES, key=lambda t, i=i: (VALUE[n.state(t, i)], -STAGES.index(t))) == s
                         and VALUE[n.state(s, i)] >= 1]
                out.writelines(lines)
                count += len(lines)
        for name, help_ in (("stagelens_signal_state", "State of a stage signal."),
                            ("stagelens_signal_value", "Value of a stage signal.")):
            def value_of(n: Node, spec, i: int, name=name):
                if spec.id != first_signal[spec.stage]:
                    return 0 if name == "stagelens_signal_state" else 0.01
                state = n.state(spec.stage, i)
                if name == "stagelens_signal_state":
                    return VALUE[state]
                limit = {"firing": spec.firing, "warn": spec.warn}.get(state) or 0.0
                return round(limit * (1.5 if spec.direction == "above" else 0.5), 4)

            family(name, help_, ((f'{n.labels},signal="{spec.id}",stage="{spec.stage}"',
                                  (lambda i, n=n, spec=spec: value_of(n, spec, i)), 0, n.down_from)
                                 for n in nodes for spec in SIGNALS))
        family("stagelens_collector_success", "1 when the collector succeeded.",
               ((f'collector="{c}",{n.labels}', (lambda i, n=n, c=c: int(c != n.failing)), 0, n.down_from)
                for n in nodes for c in COLLECTORS))
        family("stagelens_tail_share", "Share of the P99 tail's time charged to each stage.",
               ((f'{n.labels},metric="{m}",percentile="99",stage="{p}"',
                 (lambda i, p=p: 0.7 if p == "compute" else 0.1), 0, n.down_from)
                for n in nodes for m in ("ttft", "latency") for p in TAIL_PARTS))
        out.write("# EOF\n")
    return count


def backfill(workdir: Path, nodes: int, seed: int) -> dict:
    steps = (HISTORY_S + AHEAD_S) // STEP_S
    start = int(time.time()) - HISTORY_S
    start -= start % STEP_S
    rng = random.Random(seed)
    t0 = time.perf_counter()
    fleet = [Node(i, steps, rng) for i in range(nodes)]
    samples = write_openmetrics(workdir / "fleet.om", fleet, start, steps)
    t1 = time.perf_counter()
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(workdir / "fleet.om"),
                    str(workdir / "data")], check=True)
    t2 = time.perf_counter()
    size = (workdir / "fleet.om").stat().st_size
    (workdir / "fleet.om").unlink()
    last = steps - 1 - AHEAD_S // STEP_S   # the step at about now
    return {"nodes": nodes, "samples_backfilled": samples, "openmetrics_mb": size / 2**20,
            "generate_s": t1 - t0, "backfill_s": t2 - t1, "nodes_down_now": sum(n.down_from <= last for n in fleet)}


def start_prometheus(workdir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    (workdir / "prometheus.yml").write_text(json.dumps({"global": {"scrape_interval": "15s"}}))
    process = subprocess.Popen(
        [shutil.which("prometheus") or "prometheus", f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--storage.tsdb.retention.time=30d", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=open(workdir / "prometheus.log", "wb"))   # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if urllib.request.urlopen(url + "/-/ready", timeout=2).status == 200:
                return process, url
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"prometheus did not become ready (see {workdir / 'prometheus.log'})")
        time.sleep(0.2)


def refreshes(url: str, seconds: float, every: float, prometheus_pid: int) -> dict:
    import psutil

    from stagelens.fleet.model import counts
    from stagelens.fleet.query import FleetQuery

    query = FleetQuery(url, timeout_s=10)
    t = time.perf_counter()
    first = query.fetch()    # the cold one: Prometheus reads the blocks' index for the first time
    cold_s = time.perf_counter() - t
    if first.error:
        raise RuntimeError(first.error)
    prometheus = psutil.Process(prometheus_pid)
    p0 = prometheus.cpu_times()
    r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    times = []
    end = w0 + seconds
    while True:
        t = time.perf_counter()
        view = query.fetch()
        times.append(time.perf_counter() - t)
        if view.error:
            raise RuntimeError(view.error)
        wake = w0 + len(times) * every
        if wake >= end:
            break
        time.sleep(max(0.0, wake - time.monotonic()))
    r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    p1 = prometheus.cpu_times()
    own = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    times.sort()
    last, status = view.rows, counts(view.rows)
    return {"refreshes": len(times), "first_refresh_s": cold_s,
            "refresh_p50_s": statistics.median(times), "refresh_p99_s": times[min(len(times) - 1,
                                                                                   int(len(times) * 0.99))],
            "refresh_max_s": times[-1], "series_returned": query.last_series, "answer_bytes": query.last_bytes,
            "answer_bytes_per_node": query.last_bytes / max(1, len(last)),
            "fleet_cpu_share": own / (w1 - w0), "fleet_cpu_s_per_refresh": own / len(times),
            "prometheus_cpu_share": ((p1.user + p1.system) - (p0.user + p0.system)) / (w1 - w0),
            "rows": len(last), "rows_down": status["down"], "rows_firing": status["firing"],
            "rows_warn": status["warn"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=None, help="nodes in the fleet (default 1000; --quick 200)")
    parser.add_argument("--quick", action="store_true", help="200 nodes, 20 s of refreshes")
    parser.add_argument("--seconds", type=float, default=None, help="refreshing for this long (default 60)")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between refreshes")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    nodes = args.nodes or (200 if args.quick else 1000)
    seconds = args.seconds or (20.0 if args.quick else 60.0)
    if shutil.which("promtool") is None or shutil.which("prometheus") is None:
        sys.exit("bench/fleet.py needs prometheus and promtool (apt-get install prometheus)")
    workdir = Path(tempfile.mkdtemp(prefix="stagelens-fleet-bench-"))
    process = None
    try:
        figures = backfill(workdir, nodes, args.seed)
        process, url = start_prometheus(workdir)
        figures.update(refreshes(url, seconds, args.every, process.pid))
        figures["cores"] = os.cpu_count()
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)
    emit(figures, args.json)


if __name__ == "__main__":
    main()
