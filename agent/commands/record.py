"""`stagelens record --out FILE`: the lab engine with its agent, written to a bundle as it runs."""

from __future__ import annotations

import click

from agent.commands.engine_flags import build_configs, engine_options
from agent.errors import UserError
from agent.scenarios import SCENARIOS


@click.command()
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="The bundle to write.")
@click.option("--scenario", type=click.Choice(list(SCENARIOS)), help="Run one of the lab's scenarios.")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Sampling interval in seconds.")
@engine_options
@click.pass_context
def record(ctx: click.Context, out_path: str, scenario: str | None, interval: float, **flags) -> int:
    """Record frames and request timelines of the lab engine to a bundle that `--replay` reads."""
    from agent.lab import run_lab
    from agent.record import BundleWriter

    if interval <= 0:
        raise UserError(f"--interval: must be positive, got {interval}")
    engine_cfg, workload_cfg = build_configs(flags, SCENARIOS[scenario].defaults if scenario else {})
    writer = BundleWriter.open(out_path, source=f"record {scenario or 'lab'}")
    try:
        result = run_lab(engine_cfg, workload_cfg, progress=True, interval=interval,
                         nvml_snapshot=(ctx.obj or {}).get("nvml_snapshot"), listeners=(writer.on_frame,))
    finally:
        writer.close()
    click.echo(f"wrote {writer.frames} frames and {writer.timelines} request timelines to {out_path} "
               f"(verdict {result.diagnosis.verdict})")
    return 0
