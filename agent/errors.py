"""Errors that reach the user as one clear line and an exit status, never a traceback."""


class UserError(Exception):
    """Bad input from the user (flags, config, files): exit 2."""

    exit_code = 2


class CollectError(Exception):
    """Nothing could be collected (no driver, no engine, a source that does not answer): exit 3."""

    exit_code = 3
