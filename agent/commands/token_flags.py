"""`serve`'s bearer token: from STAGELENS_TOKEN or a file, so it never has to be on the command line, where every
user of the machine reads it in `ps` (and /proc/PID/cmdline)."""

from __future__ import annotations

import functools
from pathlib import Path

import click

from agent.errors import UserError

MAX_TOKEN_FILE_BYTES = 4096

_OPTIONS = (
    click.option("--token", envvar="STAGELENS_TOKEN", help="Bearer token for the endpoints that change state. "
                 "Prefer STAGELENS_TOKEN or --token-file: on the command line it shows in `ps`."),
    click.option("--token-file", type=click.Path(dir_okay=False), help="Read the bearer token from this file (its "
                 "first line; e.g. a mounted Kubernetes Secret)."),
)


def token_options(func):
    """`--token` and `--token-file`, handed to the command as one `token: str | None`."""
    @functools.wraps(func)
    def command(*args, **kwargs):
        kwargs["token"] = resolve_token(kwargs.pop("token"), kwargs.pop("token_file"))
        return func(*args, **kwargs)

    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def resolve_token(token: str | None, token_file: str | None) -> str | None:
    """The token given, read from its file where one is named; UserError for both given, an unreadable or empty
    file. A token typed on the command line is taken, with a warning that others can read it."""
    ctx = click.get_current_context(silent=True)
    if token_file is not None:
        if token:
            raise UserError("--token-file and --token (or STAGELENS_TOKEN): give one of them")
        return _read(token_file)
    if token and ctx is not None and ctx.get_parameter_source("token") == click.core.ParameterSource.COMMANDLINE:
        click.echo("stagelens: warning: --token on the command line is readable by every user of this machine "
                   "(ps); use STAGELENS_TOKEN or --token-file", err=True)
    return token or None


def _read(path: str) -> str:
    try:
        with Path(path).open("rb") as f:
            data = f.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise UserError(f"--token-file {path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise UserError(f"--token-file {path}: larger than {MAX_TOKEN_FILE_BYTES} bytes: not a token")
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise UserError(f"--token-file {path}: not UTF-8 text") from None
    token = lines[0].strip() if lines else ""
    if not token:
        raise UserError(f"--token-file {path}: empty: no token in it")
    return token
