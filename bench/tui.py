"""The TUI's CPU share at 1 s refresh: the DGX A100 snapshot and a busy engine (the hol-blocking
bundle, replayed as if live), rendered headless at 160x48.

    python bench/tui.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _report import emit  # noqa: E402  (bench/ is the script's own directory)

from stagelens.bundle import read_bundle  # noqa: E402
from stagelens.engine_hooks.records.timeline import RequestTimeline  # noqa: E402
from stagelens.probes.sample import NodeProbe, open_backend  # noqa: E402
from stagelens.tui.app import StagelensApp  # noqa: E402
from stagelens.tui.feed import Feed, Poll  # noqa: E402

DGX = ROOT / "tests" / "fixtures" / "nvml" / "dgx_a100.json"
BUNDLE = ROOT / "tests" / "fixtures" / "bundles" / "hol-blocking.jsonl"


class LiveReplay(Feed):
    """A recorded busy engine played as live frames, each with a fresh sample of the DGX A100 snapshot."""
    kind = "local"

    def __init__(self) -> None:
        super().__init__()
        bundle = read_bundle(str(BUNDLE))
        self.frames = bundle.frames
        self.timelines = [RequestTimeline.from_dict(t) for t in bundle.timelines]   # as the TUI's feeds give them
        self.probe = NodeProbe(open_backend(str(DGX)))
        self.i = 0

    def poll(self) -> Poll:
        frame = self.frames[self.i % len(self.frames)]
        now = time.time()
        frame = replace(frame, time_unix=now, node_sample=self.probe.sample())
        self.i += 1
        return Poll(frames=[frame], timelines=self.timelines[self.i % len(self.timelines):][:3])


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(seconds: float) -> dict:
    app = StagelensApp(LiveReplay(), interval=1.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(3.0)                 # start-up and the first frames are left out
        cpu0, t0 = _cpu(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu1, t1 = _cpu(), time.monotonic()
        frames = len(app.state.frames)
        await pilot.press("q")
    return {"seconds": t1 - t0, "frames_shown": frames, "tui_cpu_ratio": (cpu1 - cpu0) / (t1 - t0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of about 20 s")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    emit(asyncio.run(measure(15.0 if args.quick else 60.0)), args.json)


if __name__ == "__main__":
    main()
