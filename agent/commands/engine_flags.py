"""The engine and workload flags, shared by `lab`, `serve --engine lab`, `record`, `tui` and `bench`;
the settings they build are agent/lab/settings.py's.

Named like vLLM's and the report's. Every default is None here, so a scenario can supply its own
and whatever the user typed wins over both.
"""

from __future__ import annotations

import click

from agent.lab.bundled_engine import ALLOCATORS, DTYPES, POLICIES, PRESETS
from agent.lab.settings import BOUNDS
from agent.numbers import Number


def _numeric(flag: str, help: str):
    """A numeric flag typed by the engine's own bound on it, so a bad value fails as the flag is read;
    EngineConfig and WorkloadConfig check the bound again for configs built other ways (scenarios,
    `--fixed`, the API, bench sweeps)."""
    b = BOUNDS[flag[2:].replace("-", "_")]
    return click.option(flag, type=Number(min=b.low, max=b.high, integer=b.integer, unit=b.unit, min_open=b.low_open),
                        help=help)


_OPTIONS = [
    click.option("--model", type=click.Choice(list(PRESETS)), help="Model size preset [small]."),
    _numeric("--models", help="Models registered, and the workload spread over them [1]."),
    _numeric("--block-size", help="Tokens per KV block, a power of two [16]."),
    _numeric("--max-num-seqs", help="Most requests running at once: the batch size [16]."),
    _numeric("--max-num-batched-tokens", help="Token budget per step [512 chunked, else 2048]."),
    click.option("--enable-chunked-prefill/--no-enable-chunked-prefill", default=None,
                 help="Split long prefills across steps and mix them with decodes [on]."),
    _numeric("--long-prefill-token-threshold",
             help="With chunked prefill, most prefill tokens one request gets per step; 0 for no cap [0]."),
    _numeric("--num-preload-models", help="Models loaded before serving starts [1]."),
    _numeric("--max-resident-models", help="Models kept resident at once [all]."),
    click.option("--allocator", type=click.Choice(ALLOCATORS), help="KV allocator [paged]."),
    click.option("--policy", type=click.Choice(POLICIES), help="Order of admission from the queue [fcfs]."),
    _numeric("--max-model-len", help="Longest sequence, prompt plus output [2048]."),
    click.option("--kv-cache-memory", help="KV cache size in bytes; 256MiB, 1GB accepted [128MiB]."),
    click.option("--device", help="cpu, cuda, cuda:N, mps or auto [auto]."),
    click.option("--dtype", type=click.Choice(DTYPES), help="Weights and KV dtype [auto: float32 on CPU]."),
    click.option("--model-dir", type=click.Path(file_okay=False), help="Where weight files are kept."),
    _numeric("--rate", help="Open-loop arrivals, requests per second [2]."),
    _numeric("--concurrency", help="Closed loop with this many requests in flight."),
    click.option("--prompt-len", help="N, uniform:A:B or lognormal:MEDIAN:SIGMA [lognormal:160:0.6]."),
    click.option("--output-len", help="N, uniform:A:B or lognormal:MEDIAN:SIGMA [uniform:16:64]."),
    _numeric("--long-prompt-share", help="Share of requests with a long prompt [0]."),
    _numeric("--long-prompt-len", help="Tokens in a long prompt [1536]."),
    _numeric("--duration", help="Seconds of arrivals [30]."),
    _numeric("--seed", help="Seed of weights and workload [0]."),
    _numeric("--temperature", help="Sampling temperature, 0 for greedy [0]."),
]


def engine_options(func):
    """Adds every engine and workload flag to a click command."""
    for option in reversed(_OPTIONS):
        func = option(func)
    return func
