"""`stagelens`: the command line. Each command lives in `agent/commands/`, one module a command."""

from __future__ import annotations

import sys

import click

from agent.errors import CollectError, UserError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="stagelens", prog_name="stagelens")
@click.option("--nvml-snapshot", type=click.Path(dir_okay=False), default=None, envvar="STAGELENS_NVML_SNAPSHOT",
              help="Replay this stagelens-nvml/1 snapshot instead of asking the NVIDIA driver.")
@click.pass_context
def cli(ctx: click.Context, nvml_snapshot: str | None) -> None:
    """Which LLM-serving bottleneck stage is firing: KV cache, scheduler or cold path."""
    ctx.obj = {"nvml_snapshot": nvml_snapshot}


def _register() -> None:
    from agent.commands import bench, diagnose, lab, probe, record, runbook, serve, topo, tui

    for command in (lab.lab, diagnose.diagnose, serve.serve, tui.tui, record.record, runbook.runbook, topo.topo,
                    probe.probe, bench.bench):
        cli.add_command(command)


GLOBAL_OPTIONS = ("--nvml-snapshot",)


def hoist_global_options(argv: list[str]) -> list[str]:
    """Global options work anywhere on the line: move them in front of the command."""
    front, rest = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in GLOBAL_OPTIONS and i + 1 < len(argv):
            front += argv[i:i + 2]
            i += 2
            continue
        if arg.split("=", 1)[0] in GLOBAL_OPTIONS:
            front.append(arg)
        else:
            rest.append(arg)
        i += 1
    return front + rest


def main(argv: list[str] | None = None) -> None:
    _register()
    argv = hoist_global_options(sys.argv[1:] if argv is None else list(argv))
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
