"""One `stagelens bench` invocation (steady, stress or sweep): its options checked, each point's
engine and workload built and measured (on the bundled engine in this process, or against `--url`),
and the results written: results.json, report.md and curve.png."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stagelens.commands.flags import diagnosis_config
from stagelens.errors import UserError
from stagelens.lab.scenarios import SCENARIOS
from stagelens.lab.settings import ENGINE_FIELDS, WORKLOAD_FIELDS, build_configs
from stagelens.loadtest.variables import VARIABLES

if TYPE_CHECKING:
    from stagelens.diagnosis import DiagnosisConfig
    from stagelens.lab.bundled_engine import EngineConfig
    from stagelens.lab.workload import WorkloadConfig
    from stagelens.loadtest.runner import KneeRule

# The share of --duration left out as warm-up unless --warmup says: the report keeps the last 20 of
# 30 minutes.
WARMUP_SHARE = {"steady": 1 / 3, "stress": 0.2, "sweep": 0.2}
# Engine flags that still mean something against a remote endpoint (they bound the generated
# lengths).
REMOTE_ENGINE_FLAGS = ("max_model_len", "seed")


def _override(variable, value) -> dict:
    return {variable.name: value, **({"rate": None} if variable.name == "concurrency" else {})}


@dataclass(frozen=True)
class _Setup:
    """How a point's engine and workload are built: the flags over the scenario's defaults, the
    point's own value over both, and the warm-up each point leaves out."""
    mode: str
    # engine and workload flags only
    flags: dict
    # the scenario's, or none
    defaults: dict
    # --warmup; None: a share of --duration (WARMUP_SHARE)
    warmup: float | None

    def configs(self, override: dict):
        engine, workload = build_configs({**self.flags, **override}, self.defaults)
        warmup = self.warmup
        if warmup is None:
            warmup = round(workload.duration * WARMUP_SHARE[self.mode], 3)
        if not 0 <= warmup < workload.duration:
            raise UserError(f"--warmup: must lie in [0, --duration), got {warmup}")
        return engine, dataclasses.replace(workload, warmup=warmup)


@dataclass(frozen=True)
class BenchRun:
    """One bench invocation, its options checked: how its points are built, measured and judged."""
    setup: _Setup
    # the options that are not engine or workload flags
    opt: dict
    dconfig: DiagnosisConfig
    rule: KneeRule
    nvml_snapshot: str | None
    # the configuration before any point's own value
    engine: EngineConfig
    workload: WorkloadConfig

    @property
    def mode(self) -> str:
        return self.setup.mode

    @property
    def url(self) -> str | None:
        return self.opt["url"]

    @classmethod
    def checked(cls, ctx: click.Context, mode: str, options: dict, step: float = 0.10,
                swept: str | None = None) -> BenchRun:
        """`options` split into the engine and workload flags and the others, each checked;
        UserError on the first that cannot be."""
        flags = (*ENGINE_FIELDS, *WORKLOAD_FIELDS)
        opt = {k: options.pop(k) for k in list(options) if k not in flags}
        _refuse_against_url(opt["url"], opt["scenario"], options, swept)
        if options.get("rate") is not None and options.get("concurrency") is not None:
            raise UserError("--rate and --concurrency: choose open-loop arrivals or a closed loop, "
                            "not both")
        defaults = dict(SCENARIOS[opt["scenario"]].defaults) if opt["scenario"] else {}
        setup = _Setup(mode, options, defaults, opt["warmup"])
        dconfig = diagnosis_config(opt.pop("config_path"), opt.pop("thresholds"))
        engine, workload = setup.configs({})
        rule = _knee_rule(opt, step)
        snapshot = (ctx.find_root().obj or {}).get("nvml_snapshot")
        return cls(setup, opt, dconfig, rule, snapshot, engine, workload)

    def execute(self, variable, values, max_steps: int | None = None) -> int:
        from stagelens.loadtest.results import Results

        out = _out_dir(self.opt["out_dir"])
        if self.mode == "sweep":
            # a bad value fails now, not after the points before it ran
            for value in values:
                self.setup.configs(_override(variable, value))
        points, knee = _run_points(self, variable, values, max_steps)
        rule = self.rule.for_variable(variable) if self.mode == "sweep" else self.rule
        config = _results_config(self)
        values_run = [p.value for p in points]
        config[variable.name] = values_run if self.mode != "steady" else values_run[0]
        target = self.url or "bundled engine (in process)"
        results = Results(self.mode, variable.name, target, config, rule.to_dict(), points, knee)
        _write(results, out)
        return 0


def _refuse_against_url(url: str | None, scenario: str | None, flags: dict,
                        swept: str | None) -> None:
    """UserError for what only the bundled engine takes, given with --url: a scenario, an engine
    flag other than those bounding the generated lengths, an engine setting swept."""
    if url and scenario:
        raise UserError("--scenario: a scenario sets up the bundled engine; it does not apply with "
                        "--url")
    if not url:
        return
    engine_given = [k for k, v in flags.items()
                    if v is not None and k in ENGINE_FIELDS and k not in REMOTE_ENGINE_FLAGS
                    and k != "models" and k != swept]
    if engine_given:
        raise UserError("--url: the remote endpoint's engine settings cannot be changed from here: "
                        + ", ".join("--" + k.replace("_", "-") for k in engine_given))
    if swept and VARIABLES[swept].engine:
        raise UserError(f"--url: {VARIABLES[swept].flag} is an engine setting of the remote "
                        "endpoint; sweep --rate or --concurrency instead")


def _knee_rule(opt: dict, step: float) -> KneeRule:
    """The knee's rule from --gain-threshold, --p99-factor, --p99-sla and --p99-metric, checked."""
    if opt["p99_sla"] is not None and opt["p99_sla"] <= 0:
        raise UserError(f"--p99-sla: must be positive seconds, got {opt['p99_sla']}")
    if opt["gain_threshold"] < 0:
        raise UserError(f"--gain-threshold: must be >= 0, got {opt['gain_threshold']}")
    if opt["p99_factor"] <= 1:
        raise UserError(f"--p99-factor: must be above 1, got {opt['p99_factor']}")
    from stagelens.loadtest.runner import KneeRule

    return KneeRule(opt["gain_threshold"], opt["p99_factor"], opt["p99_sla"], step,
                    opt["p99_metric"])


def _measure(run: BenchRun, variable):
    """measure(value) -> Point: one point at `variable` = value, on the bundled engine or against
    --url."""
    def one(value):
        engine, workload = run.setup.configs(_override(variable, value))
        if run.url:
            return _measure_remote(run, value, engine, workload)
        from stagelens.loadtest.inprocess import measure_inprocess

        return measure_inprocess(value, engine, workload, interval=run.opt["interval"],
                                 diagnosis_config=run.dconfig, nvml_snapshot=run.nvml_snapshot)
    return one


def _measure_remote(run: BenchRun, value, engine, workload):
    from stagelens.loadtest.http_point import measure_remote
    from stagelens.loadtest.loadgen import LoadOptions

    o = run.opt
    opts = LoadOptions(vocab_size=o["vocab_size"], max_model_len=engine.max_model_len,
                       served_model=o["served_model"], ignore_eos=o["ignore_eos"],
                       request_timeout=o["request_timeout"], drain_timeout=o["drain_timeout"],
                       max_requests=o["max_requests"])
    return measure_remote(value, run.url, workload, opts)


def _run_points(run: BenchRun, variable, values, max_steps: int | None):
    """(points, knee) of the run's mode, with a progress bar on stderr unless --no-progress."""
    from stagelens.loadtest import runner
    from stagelens.loadtest.progress import ProgressBar

    measure = _measure(run, variable)
    total = max_steps or len(values)
    bar = ProgressBar(f"bench {run.mode}", total, enabled=not run.opt["no_progress"])
    seconds = run.workload.duration
    try:
        if run.mode == "stress":
            return runner.run_stress(variable, values, measure, run.rule, max_steps, seconds, bar)
        if run.mode == "sweep":
            return runner.run_sweep(variable, values, measure, run.rule, seconds, bar)
        return runner.run_steady(variable, values[0], measure, seconds, bar)
    finally:
        bar.close()


def _results_config(run: BenchRun) -> dict:
    """The configuration results.json records: against --url, only what the load generator used."""
    from stagelens.commands.lab_config import config_dict

    cfg = config_dict(run.engine, run.workload)
    if run.url:
        keep = ("rate", "concurrency", "prompt_len", "output_len", "long_prompt_share",
                "long_prompt_len", "duration", "seed", "max_model_len")
        cfg = {k: cfg[k] for k in keep}
        cfg.update(served_model=run.opt["served_model"], vocab_size=run.opt["vocab_size"])
    cfg["warmup"] = run.workload.warmup
    if run.opt["scenario"]:
        cfg["scenario"] = run.opt["scenario"]
    return cfg


def _out_dir(path: str) -> Path:
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out: cannot create {out}: {exc.strerror or exc}") from None
    return out


def _write(results, out: Path) -> None:
    """results.json, report.md and (with matplotlib) curve.png into `out`; the table and the knee to
    stdout."""
    from stagelens.loadtest import report

    results.write(out / "results.json")
    (out / "report.md").write_text(report.render_report(results))
    written = ["results.json", "report.md"]
    try:
        from stagelens.loadtest.plot import plot

        plot(results, out / "curve.png")
        written.append("curve.png")
    except ImportError:
        click.echo("stagelens: matplotlib is not installed: no curve.png "
                   "(pip install 'stagelens[bench]')", err=True)
    click.echo(report.table(results) + "\n\n" + report.knee_line(results) + ".")
    click.echo(f"\nwrote {', '.join(str(out / name) for name in written)}")
