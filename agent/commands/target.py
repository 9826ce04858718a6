"""What a command reads: a recorded bundle (`--replay FILE`), a running `stagelens serve`
(`--connect URL`), or this node live. `diagnose`, `whatif` and `tui` take the same two options
and check them here, in the same words."""

from __future__ import annotations

from dataclasses import dataclass

import click

from stagelens.errors import UserError


@dataclass(frozen=True)
class Replay:
    path: str


@dataclass(frozen=True)
class Connect:
    url: str


@dataclass(frozen=True)
class Live:
    pass


Target = Replay | Connect | Live


def target_options(replay_help: str, connect_help: str):
    """`--replay FILE` and `--connect URL`, passed on as `replay_path` and `url`."""
    def add(command):
        command = click.option("--connect", "url", metavar="URL", help=connect_help)(command)
        return click.option("--replay", "replay_path", metavar="FILE",
                            type=click.Path(dir_okay=False), help=replay_help)(command)
    return add


def read_target(replay_path: str | None, url: str | None, live: bool = True) -> Target:
    """The one the options name; `live`: whether the command has a live mode when neither is
    given."""
    if replay_path and url:
        raise UserError("--replay FILE and --connect URL are alternatives: give one")
    if replay_path:
        return Replay(replay_path)
    if url:
        return Connect(url)
    if not live:
        raise UserError("give --replay FILE or --connect URL (one of them): this command has no live mode")
    return Live()


def live_only(target: Target, flags: list[str], why: str) -> None:
    """Flags that only a live run takes, refused with a recording or a server."""
    if flags and not isinstance(target, Live):
        raise UserError(f"{', '.join(flags)}: {why}, not with --replay or --connect")
