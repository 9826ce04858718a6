"""`stagelens`: the command line. Each command lives in `agent/commands/`, one module a command."""

from __future__ import annotations

import os
import re
import sys
import traceback

import click

from stagelens.errors import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNKNOWN, CollectError, UserError
from stagelens.printable import printable


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="stagelens", prog_name="stagelens")
@click.option("--nvml-snapshot", type=click.Path(dir_okay=False), default=None,
              envvar="STAGELENS_NVML_SNAPSHOT",
              help="Replay this stagelens-nvml/1 snapshot instead of asking the NVIDIA driver.")
@click.pass_context
def cli(ctx: click.Context, nvml_snapshot: str | None) -> None:
    """Which LLM-serving bottleneck stage is firing: KV cache, scheduler or cold path."""
    ctx.obj = {"nvml_snapshot": nvml_snapshot}


def _register() -> None:
    import stagelens.commands.engines as engines
    from stagelens.commands import bench, diagnose, fleet, lab, probe, record, runbook, serve, topo, tui, whatif

    for command in (lab.lab, diagnose.diagnose, serve.serve, tui.tui, record.record, runbook.runbook, topo.topo,
                    probe.probe, bench.bench, fleet.fleet, whatif.whatif,
                    engines.engines):
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
    sys.exit(run(sys.argv[1:] if argv is None else list(argv)))


def run(argv: list[str]) -> int:
    """The exit status of one command line (agent.errors): whatever goes wrong ends as one line
    on stderr."""
    try:
        _register()
        code = cli.main(args=hoist_global_options(argv), prog_name="stagelens",
                        standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("stagelens: interrupted", err=True)
        return EXIT_INTERRUPTED
    # the reader went away (`| head`): nothing left to say, and no one to say it to
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    # click's usage errors exit 2 by default: CRITICAL to a monitor
    except click.ClickException as exc:
        return _error(exc.format_message())
    except (UserError, CollectError) as exc:
        return _error(str(exc))
    except Exception as exc:
        debug = os.environ.get("STAGELENS_DEBUG", "") not in ("", "0")
        if debug:
            traceback.print_exc()
        hint = "" if debug else " (set STAGELENS_DEBUG=1 for the traceback)"
        click.echo(f"stagelens: internal error: {type(exc).__name__}: {printable(_one_line(str(exc)))}{hint}",
                   err=True)
        return EXIT_UNKNOWN
    return code if isinstance(code, int) else EXIT_OK


def _error(message: str) -> int:
    """The one line on stderr; what it quotes may have come from another process (a server's
    `error`, an engine's reason phrase): made printable, so no terminal escape reaches the user's
    terminal."""
    click.echo(f"stagelens: error: {printable(_one_line(message))}", err=True)
    return EXIT_UNKNOWN


def _one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", text.strip())


if __name__ == "__main__":
    main()
