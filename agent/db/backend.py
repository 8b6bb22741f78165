"""What an engine backend does: run trusted SQL text in a given output format and hand back bytes.

Backends (the embedded engine process, a ClickHouse server) know nothing of models, checks or
rendering; agent/db/database.py builds every statement they run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator


class DatabaseUnavailable(Exception):
    """ClickHouse cannot be reached or opened. A person has to fix these."""


class EngineError(Exception):
    """ClickHouse refused or failed a statement; the message is ClickHouse's own."""


class Backend(ABC):
    @abstractmethod
    async def query(self, sql: str, fmt: str, tag: str) -> bytes:
        """The whole output of `sql` in format `fmt`. Cancelling the caller kills the query."""

    @abstractmethod
    def stream(self, sql: str, fmt: str, tag: str) -> AsyncIterator[bytes]:
        """Output chunks as the engine produces them; closing early stops the query."""

    @abstractmethod
    async def running(self) -> list[str]:
        """Tags of the agent's queries still running in the engine."""

    @abstractmethod
    async def close(self) -> None: ...

    @property
    def sandbox_status(self) -> str:
        return "not applicable"
