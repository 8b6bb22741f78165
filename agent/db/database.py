"""The agent's one way into ClickHouse: check, cap, run, and turn failures into hints.

Backends (embedded chdb, a server through clickhouse-connect) only stream blocks of rows and kill
queries; everything the model depends on (the statement check, the N+1 row cap, error hints)
lives here so both behave the same.
"""

from __future__ import annotations

import re
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from agent.config import Settings
from agent.db.guard import CheckedStatement, QueryRefused, StatementKind, check_statement
from agent.db.hints import error_code, hint_for
from agent.db.result import QueryResult

# Wrapping a SELECT as a subquery can fail where the bare query works (duplicate or ambiguous
# column names); such queries fall back to streaming the bare statement and stopping early.
_WRAP_FAILURE_CODES = {179, 352}
_EXCEPTION_TEXT = re.compile(r"Code:\s*\d+\.\s*DB::Exception:.*", re.DOTALL)
_VERSION_SUFFIX = re.compile(r"\s*\(version [\d.]+(?: \(official build\))?\)\.?\s*")


class DatabaseError(Exception):
    """A query failed in the engine (bad SQL, a limit hit). The model can fix these."""


class DatabaseUnavailable(Exception):
    """ClickHouse cannot be reached or opened. A person has to fix these."""


@dataclass(frozen=True)
class Block:
    columns: list[str]
    types: list[str]
    rows: list[list[Any]]


@dataclass(frozen=True)
class QueryLimits:
    max_rows: int = 50
    max_execution_time: int = 30
    max_rows_to_read: int = 500_000_000
    max_bytes_to_read: int = 20_000_000_000
    max_result_rows: int = 100_000
    max_result_bytes: int = 200_000_000
    max_memory_usage: int = 4_000_000_000

    @classmethod
    def from_settings(cls, settings: Settings) -> QueryLimits:
        return cls(**{name: getattr(settings, name) for name in cls.__dataclass_fields__})

    def engine_settings(self) -> dict[str, Any]:
        """Settings for the agent's connection. `readonly` comes last: once it is 1, the engine
        refuses any further setting change in the same request or session."""
        return {
            "max_execution_time": self.max_execution_time,
            "max_rows_to_read": self.max_rows_to_read,
            "max_bytes_to_read": self.max_bytes_to_read,
            "max_result_rows": self.max_result_rows,
            "max_result_bytes": self.max_result_bytes,
            "result_overflow_mode": "break",
            "max_memory_usage": self.max_memory_usage,
            "readonly": 1,
        }


def new_query_id() -> str:
    return f"agent-{uuid.uuid4().hex}"


def clean_error(message: str) -> str:
    """The ClickHouse exception text without wrappers, version suffixes or stack traces."""
    match = _EXCEPTION_TEXT.search(message)
    text = match.group(0) if match else message
    text = text.split("\nStack trace", 1)[0]
    text = _VERSION_SUFFIX.sub(" ", text)
    # chdb repeats "Code: N. DB::Exception:" when it re-wraps an error.
    text = re.sub(r"^(Code:\s*\d+\.\s*DB::Exception:\s*)+", lambda m: m.group(1), text)
    text = re.sub(r"(Code:\s*\d+\.\s*DB::Exception:\s*)\1", r"\1", text)
    return text.strip()


class Database(ABC):
    """A read-only, limited ClickHouse connection shared by the agent, the CLI and the web app."""

    def __init__(self, limits: QueryLimits) -> None:
        self.limits = limits
        self._known_names: tuple[list[str], list[str]] | None = None

    async def execute(self, sql: str, *, max_rows: int | None = None, query_id: str | None = None) -> QueryResult:
        """Run one statement and return at most `max_rows` rows plus a has_more flag.

        Query errors come back inside the result (with a hint); an unreachable database raises
        DatabaseUnavailable. Cancelling the awaiting task kills the query.
        """
        query_id = query_id or new_query_id()
        limit = max_rows or self.limits.max_rows
        started = time.perf_counter()
        try:
            checked = check_statement(sql)
            block = await self._fetch_capped(checked, query_id, limit + 1)
        except QueryRefused as exc:
            return QueryResult(query_id=query_id, sql=sql, error=str(exc), hint=None, elapsed_ms=_elapsed_ms(started))
        except DatabaseError as exc:
            message = clean_error(str(exc))
            return QueryResult(
                query_id=query_id,
                sql=sql,
                error=message,
                error_code=error_code(message),
                hint=hint_for(message, *await self.known_names()),
                elapsed_ms=_elapsed_ms(started),
            )
        return QueryResult(
            query_id=query_id,
            sql=sql,
            columns=block.columns,
            types=block.types,
            rows=block.rows[:limit],
            has_more=len(block.rows) > limit,
            elapsed_ms=_elapsed_ms(started),
        )

    async def stream(self, sql: str, *, max_rows: int, query_id: str | None = None) -> AsyncIterator[Block]:
        """Blocks of at most `max_rows` rows in all, for exports. Raises QueryRefused/DatabaseError."""
        checked = check_statement(sql)
        query_id = query_id or new_query_id()
        run_sql = _wrap(checked, max_rows)
        remaining = max_rows
        async for block in self._stream(run_sql, query_id):
            yield Block(block.columns, block.types, block.rows[:remaining])
            remaining -= len(block.rows)
            if remaining <= 0:
                break

    async def known_names(self) -> tuple[list[str], list[str]]:
        """Table names (`db.table`) and column names, for "did you mean" hints."""
        if self._known_names is None:
            try:
                block = await self._collect(
                    "SELECT database, table, name FROM system.columns "
                    "WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema')",
                    new_query_id(),
                    20_000,
                )
            except (DatabaseError, DatabaseUnavailable):
                return [], []
            tables = sorted({f"{db}.{table}" for db, table, _ in block.rows})
            columns = sorted({column for _, _, column in block.rows})
            self._known_names = (tables, columns)
        return self._known_names

    async def _fetch_capped(self, checked: CheckedStatement, query_id: str, row_limit: int) -> Block:
        if checked.kind is StatementKind.SELECT:
            try:
                return await self._collect(_wrap(checked, row_limit), query_id, row_limit)
            except DatabaseError as exc:
                if error_code(str(exc)) not in _WRAP_FAILURE_CODES:
                    raise
        return await self._collect(checked.sql, query_id, row_limit)

    async def _collect(self, sql: str, query_id: str, row_limit: int) -> Block:
        columns: list[str] = []
        types: list[str] = []
        rows: list[list[Any]] = []
        stream = self._stream(sql, query_id)
        try:
            async for block in stream:
                columns, types = block.columns, block.types
                rows.extend(block.rows[: row_limit - len(rows)])
                if len(rows) >= row_limit:
                    break
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        return Block(columns, types, rows)

    @abstractmethod
    def _stream(self, sql: str, query_id: str) -> AsyncIterator[Block]:
        """Yield result blocks; closing the iterator early stops the query in the engine."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise DatabaseUnavailable unless a trivial query answers."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def running_queries(self) -> list[str]:
        """Query ids of the agent's queries still running in the engine (for tests and health)."""


def _wrap(checked: CheckedStatement, row_limit: int) -> str:
    if checked.kind is not StatementKind.SELECT:
        return checked.sql
    # The newline keeps a trailing `--` comment from swallowing the closing bracket.
    return f"SELECT * FROM (\n{checked.sql}\n) LIMIT {int(row_limit)}"


def _elapsed_ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)
