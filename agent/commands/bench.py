"""`stagelens bench`: the report's benchmark method — steady load, stress in 10% steps to the first
knee, one-variable sweeps, and `compare` against a saved baseline for CI. Its flags and subcommands
are here; how one invocation runs, agent/commands/bench_run.py.

On the bundled engine in this process (every engine flag, scenario defaults via --scenario), or
against any OpenAI-compatible `/v1/completions` with `--url` (an HTTP load generator; the stage
comes from the endpoint's `/api/v1/diagnosis` when it is a stagelens agent). Writes results.json,
curve.png and report.md.
"""

from __future__ import annotations

import click

from stagelens.commands.bench_run import BenchRun
from stagelens.commands.flags import diagnosis_options, engine_options, interval_option
from stagelens.errors import UserError
from stagelens.lab.scenarios import SCENARIOS
from stagelens.loadtest.variables import STRESSABLE, VARIABLES, pick_swept

_COMMON = [
    click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
                 help="Directory for results.json, curve.png and report.md."),
    click.option("--url", help="Drive this OpenAI-compatible endpoint (its /v1/completions) "
                               "instead of the bundled engine."),
    click.option("--scenario", type=click.Choice(list(SCENARIOS)),
                 help="Start from a lab scenario's settings."),
    click.option("--warmup", type=float, help="Seconds at the start of each point left out of the "
                                              "figures [a third of --duration for steady, a fifth "
                                              "otherwise]."),
    click.option("--gain-threshold", type=float, default=0.05, show_default=True,
                 help="Knee: throughput gain per 10% of added load below this."),
    click.option("--p99-factor", type=float, default=1.5, show_default=True,
                 help="Knee: P99 more than this times the point before."),
    click.option("--p99-sla", type=float, help="Knee: P99 above this many seconds."),
    click.option("--p99-metric", type=click.Choice(["latency", "ttft"]), default="latency",
                 show_default=True, help="Which P99 the knee and compare judge."),
    interval_option(default=0.5, help="Sampling interval of the bundled engine, seconds."),
    click.option("--served-model", help="With --url: the `model` field of each request."),
    click.option("--vocab-size", type=int, default=256, show_default=True,
                 help="With --url: prompt token ids are drawn below this."),
    click.option("--ignore-eos", is_flag=True,
                 help="With --url: ask the server to ignore EOS (vLLM)."),
    click.option("--request-timeout", type=float, default=60.0, show_default=True,
                 help="With --url: seconds one request may take."),
    click.option("--drain-timeout", type=float, default=60.0, show_default=True,
                 help="With --url: seconds in-flight requests get after arrivals stop."),
    click.option("--max-requests", type=int, default=100_000, show_default=True,
                 help="With --url: at most this many requests a point."),
    click.option("--no-progress", is_flag=True, help="No progress bar on stderr."),
]


def common_options(func):
    for option in reversed(_COMMON):
        func = option(func)
    return diagnosis_options(func)


def sweep_options(func):
    """The engine flags, with every sweepable one taking a comma list instead of one value."""
    func = engine_options(func)
    kept = [p for p in func.__click_params__ if p.name not in VARIABLES]
    lists = [click.Option([VARIABLES[name].flag], type=str,
                          help=f"One value, or a comma list to sweep ({_example(name)}).")
             for name in VARIABLES]
    func.__click_params__ = kept + lists[::-1]
    return func


def _example(name: str) -> str:
    return {"enable_chunked_prefill": "on,off", "allocator": "paged,contiguous", "policy": "fcfs,short-first",
            "rate": "1,2,4", "block_size": "16,32,64"}.get(name, "1,2,4,8")


@click.group()
def bench() -> None:
    """Benchmark the bundled engine or an endpoint: steady, stress to the knee, sweep, compare."""


@bench.command()
@engine_options
@common_options
@click.pass_context
def steady(ctx: click.Context, **options) -> int:
    """Fixed load: warm-up left out, the recorded window measured and diagnosed."""
    run = BenchRun.checked(ctx, "steady", options)
    variable = VARIABLES["concurrency" if run.workload.concurrency is not None else "rate"]
    return run.execute(variable, [getattr(run.workload, variable.name)])


@bench.command()
@click.option("--vary", type=click.Choice([v.replace("_", "-") for v in STRESSABLE]),
              help="The load to raise [concurrency with --concurrency, else rate]; it starts at its flag's value.")
@click.option("--step", type=float, default=0.10, show_default=True,
              help="Load added a step (0.10: 10%).")
@click.option("--max-steps", type=int, default=12, show_default=True,
              help="At most this many points.")
@engine_options
@common_options
@click.pass_context
def stress(ctx: click.Context, vary: str | None, step: float, max_steps: int, **options) -> int:
    """Raise the load in steps of 10% until the first knee (throughput flat, P99 jumping, or past
    an SLA)."""
    if not 0 < step <= 1:
        raise UserError(f"--step: must lie in (0, 1], got {step}")
    if max_steps < 2:
        raise UserError(f"--max-steps: must be at least 2, got {max_steps}")
    run = BenchRun.checked(ctx, "stress", options, step=step)
    name = vary.replace("-", "_") if vary else ("concurrency" if run.workload.concurrency is not None else "rate")
    variable = VARIABLES[name]
    if run.url and variable.engine:
        raise UserError(f"--vary {vary}: an engine setting of the remote endpoint; vary rate or concurrency")
    if name == "rate" and run.workload.concurrency is not None:
        raise UserError("--vary rate: the load is a closed loop (--concurrency); vary concurrency instead")
    if name == "concurrency" and run.workload.concurrency is None:
        raise UserError("--vary concurrency: give the starting --concurrency")
    source = run.engine if variable.engine else run.workload
    return run.execute(variable, getattr(source, name), max_steps=max_steps)


@bench.command()
@sweep_options
@common_options
@click.pass_context
def sweep(ctx: click.Context, **options) -> int:
    """One variable at a time, as a comma list: --max-num-seqs 1,2,4,8, --block-size 16,32,64,
    --enable-chunked-prefill on,off, --max-num-batched-tokens 256,512, --rate 1,2,4 ..."""
    given = {name: options.pop(name) for name in VARIABLES}
    variable, values, fixed = pick_swept(given)
    options.update(fixed)
    run = BenchRun.checked(ctx, "sweep", options, swept=variable.name)
    return run.execute(variable, values)


@bench.command()
@click.argument("baseline", type=click.Path(dir_okay=False))
@click.argument("current", type=click.Path(dir_okay=False))
@click.option("--tolerance", type=float, default=0.10, show_default=True,
              help="P99 may grow by this share before it is a regression.")
@click.option("--p99-metric", type=click.Choice(["latency", "ttft"]), default="latency",
              show_default=True)
def compare(baseline: str, current: str, tolerance: float, p99_metric: str) -> int:
    """Compare a run with a saved baseline: exit 1 when P99 regressed beyond the tolerance at any
    point."""
    from stagelens.loadtest.compare import compare as compare_runs
    from stagelens.loadtest.compare import render_comparison
    from stagelens.loadtest.results import load_results

    if tolerance < 0:
        raise UserError(f"--tolerance: must be >= 0, got {tolerance}")
    base, now = load_results(baseline), load_results(current)
    rows = compare_runs(base, now, tolerance, p99_metric)
    click.echo(render_comparison(rows, base.flag, p99_metric))
    return 1 if any(r.regressed for r in rows) else 0
