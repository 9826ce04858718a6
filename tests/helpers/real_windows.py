"""Real GPU-scale /metrics windows (tests/fixtures/real/gpu, their origins in SOURCES.md there) judged as the
agent meets them: a pair of published scrapes, taken before and after a run, served over real HTTP and read by
the agent's own engine source as one window.

`judged_pair(before, after, gap_s, kind)` serves `before`, snapshots it at a synthetic monotonic t0, switches
the server to `after` and snapshots it at t0 + gap_s, then AFTER_TICKS - 1 more times 1 s apart (the same
text: nothing published says what came next) so the diagnosis' hysteresis (rise 2, clear 3) has frames. Every
one of those later windows still reads against `before`: VllmSource keeps the oldest scrape as the window's
base until the first later one is WINDOW_S old, and the ticks stay inside that. Each snapshot is wrapped in a
Frame with the node probe's sample (the DGX A100 NVML snapshot, host=False, as real_captures.judged has it)
and fed to LiveDiagnosis. With `before=None` the one scrape is judged as real_captures.judged judges one.
"""

import socket
import time
from pathlib import Path

from stagelens.diagnosis.evaluate import LiveDiagnosis
from stagelens.engine_hooks.records.snapshot import WINDOW_S
from stagelens.frame import Frame
from stagelens.probes.sample import CollectorStatus, NodeProbe, open_backend
from stagelens.sources.scrape.engine_source import VllmSource
from tests.helpers.metrics_server import MetricsServer
from tests.helpers.real_captures import DGX, Serving, judged

GPU = Path(__file__).parents[1] / "fixtures" / "real" / "gpu"

AFTER_TICKS = 6     # frames on the `after` text: more than rise 2 / clear 3 need, all inside WINDOW_S
T0 = 10_000.0       # the synthetic monotonic time of the `before` scrape

assert AFTER_TICKS - 1 < WINDOW_S, "a later tick would read against the first `after` scrape, not `before`"


def gpu_capture(name: str) -> str:
    return (GPU / name).read_text(encoding="utf-8")


def judged_pair(before_text: str | None, after_text: str, gap_s: float, kind: str, per_s: float = 0.0):
    """(Diagnosis, last Frame) for the window `before` -> `after`, `gap_s` seconds apart; `before=None`:
    the single scrape `after`, its counters growing `per_s` of themselves a second (real_captures.judged)."""
    if before_text is None:
        serving = Serving(after_text, per_s)
        try:
            return judged(serving, kind)
        finally:
            serving.server.close()
    if not gap_s > 0:
        raise ValueError(f"the gap between the scrapes must be positive, got {gap_s}")
    served = {"text": before_text}
    server = MetricsServer(lambda: served["text"])
    source = VllmSource(server.url, kind=kind)
    probe = NodeProbe(open_backend(DGX), host=False)
    live = LiveDiagnosis()
    unix0, node = time.time(), socket.gethostname()
    offsets = [0.0] + [gap_s + k for k in range(AFTER_TICKS)]
    try:
        for i, offset in enumerate(offsets):
            if i == 1:
                served["text"] = after_text
            frame = _frame(probe, source, T0 + offset, unix0 + offset, node)
            live.add(frame)
        base = source._scrapes[0].at
        assert base == T0, f"the last window read against a scrape at {base}, not `before` at {T0}"
    finally:
        probe.close()
        server.close()
    return live.result(), frame


def _frame(probe: NodeProbe, source: VllmSource, mono: float, unix: float, node: str) -> Frame:
    frame = Frame(unix, mono, node)
    sample = probe.sample()
    frame.node_sample = sample
    frame.collectors.extend(sample.collectors)
    started = time.perf_counter()
    frame.engine = source.snapshot(mono)     # an unreadable scrape raises here: the test fails with its reason
    frame.collectors.append(CollectorStatus("engine", True, time.perf_counter() - started))
    return frame
