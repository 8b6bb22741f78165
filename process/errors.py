"""What every command line of the project exits with, and the error a person must fix before a command
can run. The agent's CLI and the evals CLI both import it, so neither imports the other for it."""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Something a person must fix before the command can run; printed as one line, exit 2."""
