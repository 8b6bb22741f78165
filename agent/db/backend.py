"""What an engine backend does: run trusted SQL text in a given output format and hand back bytes.

Backends (the embedded engine process, a ClickHouse server) know nothing of models, checks or
rendering; agent/db/database.py builds every statement they run. Whatever a query returns, a backend
hands the app a bounded amount of it: a whole output only up to `max_bytes`, a stream in chunks of at
most CHUNK_BYTES.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from agent.db.access import RowFilters

CHUNK_BYTES = 1 << 20  # the largest piece of a stream the app holds at once
MAX_ERROR_CHARS = 16_384  # of an engine's error text, which a query partly chooses (throwIf)


def bounded_error(message: str) -> str:
    """An engine's error text, cut to MAX_ERROR_CHARS."""
    if len(message) <= MAX_ERROR_CHARS:
        return message
    return f"{message[:MAX_ERROR_CHARS]}… [{len(message) - MAX_ERROR_CHARS} characters cut]"


class DatabaseUnavailable(Exception):
    """ClickHouse cannot be reached or opened. A person has to fix these."""


class EngineRestarted(DatabaseUnavailable):
    """The engine was restarted because of another call's statement; this call did nothing wrong, and
    may be run once more."""


class EngineError(Exception):
    """ClickHouse refused or failed a statement; the message is ClickHouse's own."""


class ResultTooLarge(EngineError):
    """The output is larger than the caller said it would read; it never reached the app whole."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"the output is larger than {max_bytes} bytes")
        self.max_bytes = max_bytes


@dataclass
class ReadStats:
    """What the engine says a query read (its own statistics: chdb's result, a server's
    X-ClickHouse-Summary); None where the engine did not say."""

    rows: int | None = None
    bytes: int | None = None


class Backend(ABC):
    @abstractmethod
    async def query(
        self,
        sql: str,
        fmt: str,
        tag: str,
        *,
        max_bytes: int | None = None,
        stats: ReadStats | None = None,
        access: RowFilters | None = None,
    ) -> bytes:
        """The whole output of `sql` in format `fmt`; ResultTooLarge past `max_bytes`. Cancelling the
        caller kills the query. `stats`, when given, is filled with what the query read. `access`: the
        row filters the engine applies to every table read (None: every row)."""

    @abstractmethod
    def stream(self, sql: str, fmt: str, tag: str, *, access: RowFilters | None = None) -> AsyncGenerator[bytes, None]:
        """Output chunks (at most CHUNK_BYTES each) as the engine produces them, under `access` as
        `query`; closing early stops the query."""

    @abstractmethod
    async def running(self) -> list[str]:
        """Tags of the agent's queries still running in the engine."""

    @abstractmethod
    async def close(self) -> None: ...

    @property
    def sandbox_status(self) -> str:
        return "not applicable"
