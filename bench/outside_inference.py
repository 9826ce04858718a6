"""What reading an engine from outside costs a scrape as the traffic grows: the decided waits and the
head-of-line share inferred from a window's llm_request spans (agent/sources/inference/figures.py).

    python bench/outside_inference.py [--quick] [--json]

Synthetic windows of 10 s with N requests (a fifth with long prompts); prints the milliseconds of both
inferences per window, the median of several runs. Never pass/fail.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _report import emit  # noqa: E402  (bench/ is the script's own directory)

from stagelens.engine_hooks.records.timeline import PrefillChunk, RequestTimeline, Wait  # noqa: E402
from stagelens.sources.inference.figures import decided_waits, head_of_line_share  # noqa: E402


def window(requests: int, seed: int) -> list[RequestTimeline]:
    """`requests` arriving over 10 s, each queued then prefilled in one chunk (1,800 tokens for a fifth)."""
    rng = random.Random(seed)
    out = []
    for i in range(requests):
        arrival = rng.uniform(0.0, 10.0)
        start = arrival + rng.expovariate(20.0)
        tokens = 1800 if rng.random() < 0.2 else rng.randint(16, 300)
        end = start + tokens * 2e-5 + rng.uniform(0.0, 0.01)
        tl = RequestTimeline(f"r{i}", "m", tokens, arrival=arrival, finished=end + 0.1)
        tl.waits = [Wait(arrival, start, "queued")]
        tl.chunks = [PrefillChunk(start, end, tokens, i)]
        out.append(tl)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller windows")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes, runs = ((200, 1000), 3) if args.quick else ((200, 1000, 2000, 5000), 5)
    figures = {}
    for requests in sizes:
        timelines, times = window(requests, requests), []
        for _ in range(runs):
            started = time.perf_counter()
            decided_waits(timelines, 0.01)
            head_of_line_share(timelines, 0.005)
            times.append(time.perf_counter() - started)
        figures[f"window_{requests}_requests_ms"] = statistics.median(times) * 1000
    emit(figures, args.json)


if __name__ == "__main__":
    main()
