"""What every command line of the project exits with, and the error a person must fix before a command
can run. The agent's CLI and the evals CLI both import it, so neither imports the other for it.

The README's table of exit codes is checked against these (tests/process/test_exit_codes.py)."""

from __future__ import annotations

EXIT_OK = 0  # success
EXIT_FAILED = 1  # the query or question failed
EXIT_USAGE = 2  # a usage or configuration error, or a ClickHouse, model API or Slack it cannot reach at start
EXIT_INTERRUPTED = 130  # Ctrl-C: the run was cancelled (128 + SIGINT, as shells report it)


class UsageError(Exception):
    """Something a person must fix before the command can run; printed as one line, exit 2."""
