"""The real /metrics captures (tests/fixtures/real) served and judged as an operator would meet them."""

import time
from pathlib import Path

from stagelens.diagnosis.evaluate import LiveDiagnosis
from stagelens.probes.sample import NodeProbe, open_backend
from stagelens.sampler import Sampler
from stagelens.sources.scrape.engine_source import VllmSource
from tests.helpers.metrics_server import MetricsServer

REAL = Path(__file__).parents[1] / "fixtures" / "real"


DGX = str(Path(__file__).parents[1] / "fixtures" / "nvml" / "dgx_a100.json")   # the node beside the engine


CUMULATIVE = {"counter", "histogram", "summary"}


SAMPLES = 6     # one window, more than the hysteresis needs (rise 2, clear 3)


def capture(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def advanced(text: str, by: float) -> str:
    """The capture with every counter and histogram grown by the share `by` of what it holds, as a real
    server's grow while its traffic goes on with the same mix (its buckets keep their shape); gauges, info
    and `_created` times as they are."""
    types = {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")}
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#") and _cumulative(line.split("{", 1)[0].split(" ", 1)[0], types):
            head, value = line.rsplit(" ", 1)
            line = f"{head} {float(value) * (1 + by)!r}"
        out.append(line)
    return "\n".join(out) + "\n"


def _cumulative(name: str, types: dict[str, str]) -> bool:
    if name.endswith("_created"):
        return False
    bases = [name] + [name[: -len(x)] for x in ("_bucket", "_sum", "_count", "_total") if name.endswith(x)]
    typed = [types[b] for b in bases if b in types]
    return typed[0] in CUMULATIVE if typed else name.endswith(("_total", "_bucket", "_sum", "_count"))


class Serving:
    """A capture served over HTTP, its cumulative figures growing by `per_s` of themselves a second."""

    def __init__(self, text: str, per_s: float = 0.0) -> None:
        self.text, self.per_s, self.start = text, per_s, time.monotonic()
        self.server = MetricsServer(lambda: advanced(self.text, self.per_s * (time.monotonic() - self.start)))
        self.url = self.server.url


def judged(serving: Serving, kind: str):
    live = LiveDiagnosis()
    # the capture is judged, not this machine: its host (a busy CI's iowait reads as threads blocked on data)
    # is left out, as the snapshot stands in for its GPUs
    probe = NodeProbe(open_backend(DGX), host=False)
    sampler = Sampler(node_probe=probe, engine_source=VllmSource(serving.url, kind=kind))
    try:
        for _ in range(SAMPLES):
            frame = sampler.tick()
            assert all(c.success for c in frame.collectors if c.name == "engine"), frame.collectors
            live.add(frame)
    finally:
        probe.close()
    return live.result(), frame
