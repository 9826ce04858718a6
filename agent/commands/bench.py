"""`stagelens bench`: the report's benchmark method — steady load, stress in 10% steps to the first knee,
one-variable sweeps, and `compare` against a saved baseline for CI.

On the bundled engine in this process (every engine flag, scenario defaults via --scenario), or against
any OpenAI-compatible `/v1/completions` with `--url` (an HTTP load generator; the stage comes from the
endpoint's `/api/v1/diagnosis` when it is a stagelens agent). Writes results.json, curve.png and report.md.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from stagelens.commands.flags import diagnosis_config, diagnosis_options, engine_options, interval_option
from stagelens.errors import UserError
from stagelens.lab.scenarios import SCENARIOS
from stagelens.lab.settings import ENGINE_FIELDS, WORKLOAD_FIELDS, build_configs
from stagelens.loadtest.variables import STRESSABLE, VARIABLES, pick_swept

# The share of --duration left out as warm-up unless --warmup says: the report keeps the last 20 of 30 minutes.
WARMUP_SHARE = {"steady": 1 / 3, "stress": 0.2, "sweep": 0.2}
# Engine flags that still mean something against a remote endpoint (they bound the generated lengths).
REMOTE_ENGINE_FLAGS = ("max_model_len", "seed")


_COMMON = [
    click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
                 help="Directory for results.json, curve.png and report.md."),
    click.option("--url", help="Drive this OpenAI-compatible endpoint (its /v1/completions) instead of the "
                               "bundled engine."),
    click.option("--scenario", type=click.Choice(list(SCENARIOS)), help="Start from a lab scenario's settings."),
    click.option("--warmup", type=float, help="Seconds at the start of each point left out of the figures "
                                              "[a third of --duration for steady, a fifth otherwise]."),
    click.option("--gain-threshold", type=float, default=0.05, show_default=True,
                 help="Knee: throughput gain per 10% of added load below this."),
    click.option("--p99-factor", type=float, default=1.5, show_default=True,
                 help="Knee: P99 more than this times the point before."),
    click.option("--p99-sla", type=float, help="Knee: P99 above this many seconds."),
    click.option("--p99-metric", type=click.Choice(["latency", "ttft"]), default="latency", show_default=True,
                 help="Which P99 the knee and compare judge."),
    interval_option(default=0.5, help="Sampling interval of the bundled engine, seconds."),
    click.option("--served-model", help="With --url: the `model` field of each request."),
    click.option("--vocab-size", type=int, default=256, show_default=True,
                 help="With --url: prompt token ids are drawn below this."),
    click.option("--ignore-eos", is_flag=True, help="With --url: ask the server to ignore EOS (vLLM)."),
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
    run = _Run(ctx, "steady", options)
    variable = VARIABLES["concurrency" if run.workload.concurrency is not None else "rate"]
    return run.execute(variable, [getattr(run.workload, variable.name)])


@bench.command()
@click.option("--vary", type=click.Choice([v.replace("_", "-") for v in STRESSABLE]),
              help="The load to raise [concurrency with --concurrency, else rate]; it starts at its flag's value.")
@click.option("--step", type=float, default=0.10, show_default=True, help="Load added a step (0.10: 10%).")
@click.option("--max-steps", type=int, default=12, show_default=True, help="At most this many points.")
@engine_options
@common_options
@click.pass_context
def stress(ctx: click.Context, vary: str | None, step: float, max_steps: int, **options) -> int:
    """Raise the load in steps of 10% until the first knee (throughput flat, P99 jumping, or past an SLA)."""
    if not 0 < step <= 1:
        raise UserError(f"--step: must lie in (0, 1], got {step}")
    if max_steps < 2:
        raise UserError(f"--max-steps: must be at least 2, got {max_steps}")
    run = _Run(ctx, "stress", options, step=step)
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
    run = _Run(ctx, "sweep", options, swept=(variable.name, values[0]))
    return run.execute(variable, values)


@bench.command()
@click.argument("baseline", type=click.Path(dir_okay=False))
@click.argument("current", type=click.Path(dir_okay=False))
@click.option("--tolerance", type=float, default=0.10, show_default=True,
              help="P99 may grow by this share before it is a regression.")
@click.option("--p99-metric", type=click.Choice(["latency", "ttft"]), default="latency", show_default=True)
def compare(baseline: str, current: str, tolerance: float, p99_metric: str) -> int:
    """Compare a run with a saved baseline: exit 1 when P99 regressed beyond the tolerance at any point."""
    from stagelens.loadtest.compare import compare as compare_runs
    from stagelens.loadtest.compare import render
    from stagelens.loadtest.results import load_results

    if tolerance < 0:
        raise UserError(f"--tolerance: must be >= 0, got {tolerance}")
    base, now = load_results(baseline), load_results(current)
    rows = compare_runs(base, now, tolerance, p99_metric)
    click.echo(render(rows, base.flag, p99_metric))
    return 1 if any(r.regressed for r in rows) else 0


def _override(variable, value) -> dict:
    return {variable.name: value, **({"rate": None} if variable.name == "concurrency" else {})}


class _Run:
    """One bench invocation: the resolved configuration, the target, and how a point is measured."""

    def __init__(self, ctx: click.Context, mode: str, options: dict, step: float = 0.10,
                 swept: tuple[str, object] | None = None) -> None:
        self.mode, self.ctx = mode, ctx
        opt = {k: options.pop(k) for k in list(options) if k not in ENGINE_FIELDS and k not in WORKLOAD_FIELDS}
        self.flags = options                       # engine and workload flags only
        self.opt = opt
        self.url: str | None = opt["url"]
        scenario = opt["scenario"]
        if self.url and scenario:
            raise UserError("--scenario: a scenario sets up the bundled engine; it does not apply with --url")
        if self.url:
            engine_given = [k for k, v in self.flags.items()
                            if v is not None and k in ENGINE_FIELDS and k not in REMOTE_ENGINE_FLAGS
                            and k != "models" and (swept is None or k != swept[0])]
            if engine_given:
                raise UserError("--url: the remote endpoint's engine settings cannot be changed from here: "
                                + ", ".join("--" + k.replace("_", "-") for k in engine_given))
            if swept and VARIABLES[swept[0]].engine:
                raise UserError(f"--url: {VARIABLES[swept[0]].flag} is an engine setting of the remote "
                                "endpoint; sweep --rate or --concurrency instead")
        if self.flags.get("rate") is not None and self.flags.get("concurrency") is not None:
            raise UserError("--rate and --concurrency: choose open-loop arrivals or a closed loop, not both")
        self.defaults = dict(SCENARIOS[scenario].defaults) if scenario else {}
        self.dconfig = diagnosis_config(opt.pop("config_path"), opt.pop("thresholds"))
        self.engine, self.workload = self.configs({})
        if opt["p99_sla"] is not None and opt["p99_sla"] <= 0:
            raise UserError(f"--p99-sla: must be positive seconds, got {opt['p99_sla']}")
        if opt["gain_threshold"] < 0:
            raise UserError(f"--gain-threshold: must be >= 0, got {opt['gain_threshold']}")
        if opt["p99_factor"] <= 1:
            raise UserError(f"--p99-factor: must be above 1, got {opt['p99_factor']}")
        from stagelens.loadtest.runner import KneeRule

        self.rule = KneeRule(opt["gain_threshold"], opt["p99_factor"], opt["p99_sla"], step, opt["p99_metric"])

    def configs(self, override: dict):
        engine, workload = build_configs({**self.flags, **override}, self.defaults)
        warmup = self.opt["warmup"]
        if warmup is None:
            warmup = round(workload.duration * WARMUP_SHARE[self.mode], 3)
        if not 0 <= warmup < workload.duration:
            raise UserError(f"--warmup: must lie in [0, --duration), got {warmup}")
        return engine, dataclasses.replace(workload, warmup=warmup)

    def measure(self, variable):
        snapshot = (self.ctx.find_root().obj or {}).get("nvml_snapshot")

        def one(value):
            engine, workload = self.configs(_override(variable, value))
            if self.url:
                from stagelens.loadtest.http_point import measure_remote
                from stagelens.loadtest.loadgen import LoadOptions

                o = self.opt
                opts = LoadOptions(vocab_size=o["vocab_size"], max_model_len=engine.max_model_len,
                                   served_model=o["served_model"], ignore_eos=o["ignore_eos"],
                                   request_timeout=o["request_timeout"], drain_timeout=o["drain_timeout"],
                                   max_requests=o["max_requests"])
                return measure_remote(value, self.url, workload, opts)
            from stagelens.loadtest.inprocess import measure_inprocess

            return measure_inprocess(value, engine, workload, interval=self.opt["interval"],
                                     diagnosis_config=self.dconfig, nvml_snapshot=snapshot)
        return one

    def config(self) -> dict:
        from stagelens.commands.lab_config import config_dict

        cfg = config_dict(self.engine, self.workload)
        if self.url:
            keep = ("rate", "concurrency", "prompt_len", "output_len", "long_prompt_share", "long_prompt_len",
                    "duration", "seed", "max_model_len")
            cfg = {k: cfg[k] for k in keep}
            cfg.update(served_model=self.opt["served_model"], vocab_size=self.opt["vocab_size"])
        cfg["warmup"] = self.workload.warmup
        if self.opt["scenario"]:
            cfg["scenario"] = self.opt["scenario"]
        return cfg

    def execute(self, variable, values, max_steps: int | None = None) -> int:
        from stagelens.loadtest import runner
        from stagelens.loadtest.progress import ProgressBar
        from stagelens.loadtest.results import Results

        out = Path(self.opt["out_dir"])
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--out: cannot create {out}: {exc.strerror or exc}") from None
        if self.mode == "sweep":
            for value in values:        # a bad value fails now, not after the points before it ran
                self.configs(_override(variable, value))
        measure = self.measure(variable)
        total = max_steps or len(values)
        bar = ProgressBar(f"bench {self.mode}", total, enabled=not self.opt["no_progress"])
        seconds = self.workload.duration
        try:
            if self.mode == "stress":
                points, knee = runner.run_stress(variable, values, measure, self.rule, max_steps, seconds, bar)
            elif self.mode == "sweep":
                points, knee = runner.run_sweep(variable, values, measure, self.rule, seconds, bar)
            else:
                points, knee = runner.run_steady(variable, values[0], measure, seconds, bar)
        finally:
            bar.close()
        rule = self.rule.for_variable(variable) if self.mode == "sweep" else self.rule
        config = self.config()
        config[variable.name] = [p.value for p in points] if self.mode != "steady" else points[0].value
        results = Results(self.mode, variable.name, self.url or "bundled engine (in process)", config,
                          rule.to_dict(), points, knee)
        return self.write(results, out)

    def write(self, results, out: Path) -> int:
        from stagelens.loadtest import report

        results.write(out / "results.json")
        text = report.render(results)
        (out / "report.md").write_text(text)
        written = ["results.json", "report.md"]
        try:
            from stagelens.loadtest.plot import plot

            plot(results, out / "curve.png")
            written.append("curve.png")
        except ImportError:
            click.echo("stagelens: matplotlib is not installed: no curve.png (pip install 'stagelens[bench]')",
                       err=True)
        click.echo(report.table(results) + "\n\n" + report.knee_line(results) + ".")
        click.echo(f"\nwrote {', '.join(str(out / name) for name in written)}")
        return 0
