"""`stagelens`: the command line. Each command lives in `agent/commands/`, one module a command."""

from __future__ import annotations

import sys

import click

from agent.errors import CollectError, UserError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--nvml-snapshot", type=click.Path(dir_okay=False), default=None, envvar="STAGELENS_NVML_SNAPSHOT",
              help="Replay this stagelens-nvml/1 snapshot instead of asking the NVIDIA driver.")
@click.pass_context
def cli(ctx: click.Context, nvml_snapshot: str | None) -> None:
    """Which LLM-serving bottleneck stage is firing: KV cache, scheduler or cold path."""
    ctx.obj = {"nvml_snapshot": nvml_snapshot}


def _register() -> None:
    from agent.commands import lab, probe, topo

    cli.add_command(lab.lab)
    cli.add_command(topo.topo)
    cli.add_command(probe.probe)


def main(argv: list[str] | None = None) -> None:
    _register()
    try:
        code = cli.main(args=argv, prog_name="stagelens", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("stagelens: interrupted", err=True)
        code = 130
    except click.ClickException as exc:
        click.echo(f"stagelens: error: {exc.format_message()}", err=True)
        code = exc.exit_code
    except (UserError, CollectError) as exc:
        click.echo(f"stagelens: error: {exc}", err=True)
        code = exc.exit_code
    sys.exit(code or 0)
