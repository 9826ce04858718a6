"""Errors that reach the user as one clear line, and the exit statuses every command shares.

The statuses are the monitoring-plugin convention (Nagios, Icinga, Sensu), so `diagnose` can be
run as a check as it is: only its verdict answers WARNING or CRITICAL; whatever stops any command
(bad input, nothing to collect, an internal error) is UNKNOWN, never a status a verdict could mean.
"""

EXIT_OK = 0
EXIT_WARNING = 1
EXIT_CRITICAL = 2
EXIT_UNKNOWN = 3
EXIT_INTERRUPTED = 130   # 128 + SIGINT, as a shell reports it
EXIT_BROKEN_PIPE = 141   # 128 + SIGPIPE: the reader of our output went away


class UserError(Exception):
    """Bad input from the user (flags, config, files): UNKNOWN."""

    exit_code = EXIT_UNKNOWN


class CollectError(Exception):
    """Nothing could be collected (no driver, no engine, a source that does not answer): UNKNOWN."""

    exit_code = EXIT_UNKNOWN
