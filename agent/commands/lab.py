"""`stagelens lab`: the bundled engine on a workload, hooks, sampler and diagnosis, end to end.

With `--scenario` it reproduces one stage of the report; `--fixed` then applies the diagnosis's own
recommendations and prints the before/after table.
"""

from __future__ import annotations

import json
import threading

import click

from stagelens.commands.flags import diagnosis_config, diagnosis_options, engine_options, interval_option
from stagelens.lab.fixes import as_flags, fix_flags
from stagelens.lab.scenarios import SCENARIOS
from stagelens.lab.settings import build_configs


@click.command()
@click.option("--scenario", type=click.Choice(list(SCENARIOS)),
              help="Reproduce one stage of the report.")
@click.option("--fixed", is_flag=True,
              help="Then apply the diagnosis's recommendations and run again.")
@engine_options
@diagnosis_options
@interval_option()
@click.option("--record", "record_path", type=click.Path(dir_okay=False),
              help="Also write the frames and request timelines to this bundle (JSON lines).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.pass_context
def lab(ctx: click.Context, scenario: str | None, fixed: bool, config_path, thresholds,
        interval: float, record_path: str | None, as_json: bool, **flags) -> int:
    """Run the bundled engine: throughput, TTFT, TPOT, P50/P99 latency, preemptions, and the
    diagnosis."""
    spec = SCENARIOS.get(scenario) if scenario else None
    defaults = dict(spec.defaults) if spec else {}
    dconfig = diagnosis_config(config_path, thresholds)
    engine_cfg, workload_cfg = build_configs(flags, defaults)

    from stagelens.bundle import BundleWriter

    # imports torch: only once the flags are known to be good
    from stagelens.lab.scenario_run import run_lab

    snapshot = (ctx.obj or {}).get("nvml_snapshot")
    stop = threading.Event()    # a bundle that cannot be written (a full disk) ends the run
    writer = BundleWriter.open(record_path, source=f"lab {scenario or ''}".strip(), stop=stop) if record_path else None
    try:
        listeners = (writer.on_frame,) if writer else ()
        before = run_lab(engine_cfg, workload_cfg, progress=not as_json, interval=interval,
                         stop=stop, diagnosis_config=dconfig, nvml_snapshot=snapshot,
                         listeners=listeners, on_start=writer.follow if writer else None)
        after, applied = None, {}
        if fixed:
            applied = fix_flags(before.diagnosis)
            fixed_cfg, fixed_workload = build_configs({**flags, **applied}, defaults)
            after = run_lab(fixed_cfg, fixed_workload, progress=not as_json, interval=interval,
                            diagnosis_config=dconfig, nvml_snapshot=snapshot)
    finally:
        if writer:
            writer.close()
    if as_json:
        click.echo(json.dumps(_json(scenario, before, after, applied, engine_cfg, workload_cfg),
                              indent=2))
    else:
        click.echo(_text(spec, before, after, applied))
    return 0


def _json(scenario, before, after, applied, engine_cfg, workload_cfg) -> dict:
    from stagelens.commands.lab_config import config_dict

    out = {"scenario": scenario, "config": config_dict(engine_cfg, workload_cfg), **before.figures,
           "diagnosis": before.diagnosis.to_dict(), "run": before.run.to_dict()}
    if after is not None:
        out["fixed"] = {"applied": applied, "applied_flags": as_flags(applied),
                        "config": config_dict(after.engine, after.workload), **after.figures,
                        "diagnosis": after.diagnosis.to_dict()}
    return out


def _text(spec, before, after, applied) -> str:
    from stagelens.commands.lab_config import render_figures
    from stagelens.diagnosis_text import render_before_after, render_diagnosis, render_run

    parts = []
    if spec:
        parts.append(f"scenario {spec.name}: {spec.summary}\n")
    parts.append(render_figures(before.engine, before.workload, before.figures))
    parts.append("\n" + render_run(before.run))
    parts.append("\n" + render_diagnosis(before.diagnosis, verbose=False))
    if after is not None:
        parts.append(f"\napplied: {as_flags(applied)}\n")
        parts.append(render_before_after(before.figures, after.figures, _verdict(before.diagnosis),
                                         _verdict(after.diagnosis)))
    return "\n".join(parts)


def _verdict(diagnosis) -> str:
    return diagnosis.verdict + (f" ({diagnosis.root_stage})" if diagnosis.root_stage else "")
