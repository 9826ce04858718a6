"""Cost of the hooks: engine throughput with every hook on vs off, A/B interleaved, and the hooks'
own time per engine step.

    python bench/hooks_overhead.py [--quick | --smoke] [--json] [--device cuda] [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _device import add_engine_flags, checked_device, synchronize  # noqa: E402  (bench/ is the script's own)
from _report import emit  # noqa: E402

from stagelens.engine_hooks import instrument, uninstrument  # noqa: E402
from stagelens.engine_hooks.engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from stagelens.engine_hooks.hooks.guard import HookGuard  # noqa: E402


class TimedGuard(HookGuard):
    """The hook guard, also adding up the time spent inside hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0

    def run(self, hook, fn, *args) -> None:
        t = time.perf_counter()
        super().run(hook, fn, *args)
        self.seconds += time.perf_counter() - t


def one_run(engine: LLMEngine, prompts: list[list[int]], max_tokens: int) -> tuple[float, int, int]:
    """Seconds, output tokens and steps for one batch of requests driven to completion."""
    steps_before = engine.totals.steps
    synchronize(engine.device)
    t = time.perf_counter()
    reqs = [engine.submit(p, SamplingParams(max_tokens=max_tokens)) for p in prompts]
    engine.run_until_idle()
    synchronize(engine.device)
    return time.perf_counter() - t, sum(len(r.output_token_ids) for r in reqs), engine.totals.steps - steps_before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of under a minute")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pairs", type=int, default=None)
    add_engine_flags(parser)
    args = parser.parse_args()
    device = checked_device(parser, args)
    pairs = args.pairs or (1 if args.smoke else 10 if args.quick else 20)
    requests, max_tokens = (2, 4) if args.smoke else (8, 16) if args.quick else (16, 32)
    engine = LLMEngine(EngineConfig(model="tiny" if args.smoke else "small", device=str(device), max_num_seqs=16,
                                    model_dir=args.model_dir))
    vocab = engine.config.preset.vocab_size
    rng = random.Random(0)
    prompts = [[rng.randrange(1000) % vocab for _ in range(rng.randint(32, 160))] for _ in range(requests)]
    one_run(engine, prompts, 4)   # warm-up
    on, off, guard_seconds, on_steps = [], [], 0.0, 0
    for i in range(pairs):
        order = ("off", "on") if i % 2 == 0 else ("on", "off")   # interleaved, alternating which goes first
        for mode in order:
            if mode == "on":
                recorder = instrument(engine)
                recorder.guard = TimedGuard()
            seconds, tokens, steps = one_run(engine, prompts, max_tokens)
            if mode == "on":
                guard_seconds += recorder.guard.seconds
                on_steps += steps
                uninstrument(engine)
                on.append(tokens / seconds)
            else:
                off.append(tokens / seconds)
    ratios = [a / b for a, b in zip(on, off, strict=True)]
    figures = {
        "device": str(device),
        "pairs": pairs,
        "throughput_on_tokens_per_s": statistics.median(on),
        "throughput_off_tokens_per_s": statistics.median(off),
        "throughput_ratio_on_off": statistics.median(ratios),
        "throughput_ratio_on_off_min": min(ratios),
        "throughput_ratio_on_off_max": max(ratios),
        "hook_us_per_step": guard_seconds / on_steps * 1e6,
        "steps_per_run": on_steps / pairs,
    }
    emit(figures, args.json)


if __name__ == "__main__":
    main()
