"""The agent's one way into ClickHouse: check, cap, run, render, and turn failures into hints.

For SQL a model wrote, every statement the engine runs is built here around the canonical text
ClickHouse itself printed and the check approved (agent/db/statement.py): parse, describe, then the
capped select that renders cells in the engine (agent/db/rendering.py). Backends only move bytes.
Trusted SQL of the agent's own (schema introspection) goes through `catalog_rows`, never through
`execute`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from functools import partial
from typing import Any, TypeVar

from agent.access.policy import Policy
from agent.db import rendering
from agent.db.access import RowFilters, policy_key, without_read_figures
from agent.db.backend import Backend, DatabaseUnavailable, EngineError, ReadStats, ResultTooLarge
from agent.db.export import Column, Export
from agent.db.functions import FunctionPolicy
from agent.db.hints import clean_error, error_code, hint_for
from agent.db.rendering import Cell
from agent.db.result import QueryResult
from agent.db.scope import Scope, within_policy
from agent.db.share import EngineShare
from agent.db.statement import (
    READ_ONLY,
    CheckedStatement,
    QueryRefused,
    StatementPolicy,
    UnknownTable,
    decode_parse,
    parse_request,
    precheck,
)
from agent.limits import Limits, cut_text
from agent.tracing import span

log = logging.getLogger(__name__)
_CHECK_CACHE_SIZE = 512
_LARGE_INPUT_BYTES = 256 * 1024  # above it, reading a result or a parse runs in a thread
T = TypeVar("T")
_NAMES_TTL_S = 300.0
_NAMES_REFRESH_S = 10.0  # a table the names do not know: look again, at most this often
_PARSE_MAX_BYTES = 32 << 20  # canonical text and AST of the longest SQL accepted, with room to spare
DOWNLOADS = "downloads"  # the share every CSV download counts against, together


def new_query_id() -> str:
    return f"agent-{uuid.uuid4().hex}"


class Database:
    """Read-only, limited, scoped ClickHouse access shared by the agent, the CLI and the web app."""

    def __init__(
        self,
        backend: Backend,
        *,
        scope: Scope,
        functions: FunctionPolicy,
        max_rows: int = 50,
        max_cell_chars: int = 200,
        limits: Limits | None = None,
    ) -> None:
        self.backend = backend
        self.scope = scope
        self.functions = functions
        self.max_rows = max_rows
        self.max_cell_chars = max_cell_chars
        self.limits = limits or Limits()
        self.share = EngineShare(
            total=self.limits.max_concurrent_queries, per_owner=self.limits.max_parallel_queries_per_run
        )
        self._policy = StatementPolicy(scope, functions)
        self._checked: OrderedDict[tuple[str, Any], CheckedStatement] = OrderedDict()
        self._names: tuple[float, list[tuple[str, str]]] | None = None  # when read; (db.table, column) in scope

    # --- SQL a model wrote ---

    async def execute(
        self,
        sql: str,
        *,
        max_rows: int | None = None,
        query_id: str | None = None,
        owner: str | None = None,
        policy: Policy | None = None,
    ) -> QueryResult:
        """Run one statement and return at most `max_rows` rows plus a has_more flag.

        It waits for a slot of `owner`'s share of the engine (a run's id; by default its own). Under a
        `policy`, only its tables are known and the engine reads only its rows (None: all of the scope).
        A refusal or an engine error comes back inside the result (with a hint); an unreachable database
        raises DatabaseUnavailable. Cancelling the awaiting task kills the query.
        """
        query_id = query_id or new_query_id()
        with span("agent.db.query", db__system="clickhouse", agent__query_id=query_id) as traced:
            async with self.share.slot(owner or query_id):
                result = await self._execute(sql, max_rows or self.max_rows, query_id, policy)
            traced.set(
                agent__rows=len(result.rows), agent__error_code=result.error_code, agent__failed=bool(result.error)
            )
            return result

    async def _execute(self, sql: str, limit: int, query_id: str, policy: Policy | None) -> QueryResult:
        started = time.perf_counter()
        try:
            checked = await self.check(sql, query_id, policy=policy)
            access = await self.row_filters(policy)
            columns = await self._describe(checked, query_id, access)
            read = ReadStats()
            raw = await self.backend.query(
                rendering.capped_select(checked.sql, limit=limit + 1, max_cell_chars=self.max_cell_chars),
                rendering.CAPPED_FORMAT,
                query_id,
                max_bytes=self._capped_bytes(limit + 1, len(columns)),
                stats=read,
                access=access,
            )
            rendered = await _off_the_loop_if_large(len(raw), rendering.parse_capped, raw, self.max_cell_chars)
        except UnknownTable as exc:
            tables, _ = await self._hint_names(policy)
            hint = hint_for(f"Code: 60. Unknown table expression identifier '{exc.name}'", tables)
            return QueryResult(
                query_id=query_id, sql=sql, error=str(exc), error_code=60, hint=hint, elapsed_ms=_elapsed_ms(started)
            )
        except QueryRefused as exc:
            return QueryResult(query_id=query_id, sql=sql, error=str(exc), elapsed_ms=_elapsed_ms(started))
        except (ValueError, UnicodeError) as exc:  # a result this code could not read: never crash the run
            log.exception("could not read the result of %s", query_id)
            error = f"The result could not be read ({type(exc).__name__}); try selecting simpler values."
            return QueryResult(query_id=query_id, sql=sql, error=error, elapsed_ms=_elapsed_ms(started))
        except EngineError as exc:
            message = await self._cleaned(exc, policy)
            return QueryResult(
                query_id=query_id,
                sql=sql,
                error=message,
                error_code=error_code(message),
                hint=hint_for(message, *await self._hint_names(policy)),
                elapsed_ms=_elapsed_ms(started),
            )
        return QueryResult(
            query_id=query_id,
            sql=sql,
            ran_sql=checked.sql,
            columns=[c.name for c in columns],
            types=[c.type for c in columns],
            rows=rendered.rows[:limit],
            totals=rendered.totals,  # as ClickHouse printed them (a subquery's WITH TOTALS too)
            has_more=len(rendered.rows) > limit,
            elapsed_ms=_elapsed_ms(started),
            rows_read=read.rows,
            bytes_read=read.bytes,
        )

    def _capped_bytes(self, rows: int, columns: int) -> int:
        """A backstop on a capped select's output: every cell at its cap, as `x` and hex, plus totals."""
        per_cell = 2 * 4 * (self.max_cell_chars + 40) + 2
        return (rows + 2) * max(columns, 1) * per_cell + 4096

    async def check(self, sql: str, query_id: str | None = None, *, policy: Policy | None = None) -> CheckedStatement:
        """The canonical statement ClickHouse parsed from `sql`, if the agent may run it (under `policy`,
        reading only its tables).

        Raises QueryRefused, or EngineError for SQL ClickHouse cannot parse."""
        precheck(sql)
        key = (sql, policy_key(policy))
        cached = self._checked.get(key)
        if cached is not None:
            self._checked.move_to_end(key)
            return cached
        try:
            raw = await self.backend.query(
                parse_request(sql), "JSONCompactEachRow", query_id or new_query_id(), max_bytes=_PARSE_MAX_BYTES
            )
        except ResultTooLarge:
            raise QueryRefused("The SQL is too complex to check; write it more simply.") from None
        except EngineError as exc:
            if "does not support JSON serialization" in str(exc):  # DESCRIBE, EXISTS, SHOW ...
                raise QueryRefused(READ_ONLY) from None
            raise
        try:
            canonical, ast = await _off_the_loop_if_large(len(raw), lambda: decode_parse(*json.loads(raw)))
        except (ValueError, TypeError):
            raise QueryRefused("The statement could not be checked.") from None
        checked = await self._check_parsed(canonical, ast, policy)
        self._checked[key] = checked
        if len(self._checked) > _CHECK_CACHE_SIZE:
            self._checked.popitem(last=False)
        return checked

    async def _check_parsed(self, canonical: str, ast: str, policy: Policy | None) -> CheckedStatement:
        """The check's verdict, with the tables the schema introspection found in scope that `policy`
        lets read; a table it does not know makes it look once more (a table created a moment ago;
        another policy's table is unknown either way). Always in a thread: how
        long a check takes depends on the statement's shape, not only its size, and a model anyone can
        talk to chooses the shape (the check's step budget bounds the thread's work)."""
        for attempt in range(2):
            tables = frozenset((await self.known_names(refresh=attempt == 1, policy=policy))[0])
            try:
                check = self._policy.check if policy is None else partial(self._policy.check, row_filtered=True)
                return await asyncio.to_thread(check, canonical, ast, tables)
            except UnknownTable:
                if attempt == 1 or not self._names_stale(_NAMES_REFRESH_S):
                    raise
            except (ValueError, TypeError):
                raise QueryRefused("The statement could not be checked.") from None
            except RecursionError:
                raise QueryRefused("The SQL is nested too deeply to check; write it more simply.") from None
        raise AssertionError("unreachable")

    async def _describe(self, checked: CheckedStatement, query_id: str, access: RowFilters | None) -> list[Column]:
        """The statement's columns, their names and types cut to their caps. The output is read only up
        to what every column at its caps could take; a query past that is refused."""
        limits = self.limits
        try:
            raw = await self.backend.query(
                rendering.describe(checked.sql),
                "JSONCompactEachRow",
                query_id,
                max_bytes=limits.describe_bytes,
                access=access,  # describing evaluates scalar subqueries: they read under the policy too
            )
        except ResultTooLarge:
            raise QueryRefused(
                "The query's column names or types are far too long to show; give the columns short aliases "
                "(AS name) and cast long types (toString)."
            ) from None
        lines = raw.decode("utf-8", errors="replace").splitlines()  # names and types may hold any bytes
        if len(lines) > limits.max_result_columns:
            raise QueryRefused(f"The query returns {len(lines)} columns; select at most {limits.max_result_columns}.")
        rows = [row for row in map(json.loads, lines) if row]
        return [
            Column(
                cut_text(str(row[0]), limits.max_column_name_chars), cut_text(str(row[1]), limits.max_column_type_chars)
            )
            for row in rows
        ]

    async def export(
        self,
        sql: str,
        *,
        max_rows: int,
        max_cell_chars: int | None = None,
        owner: str = DOWNLOADS,
        policy: Policy | None = None,
    ) -> Export:
        """All rows (up to `max_rows`) of a statement, streamed as ClickHouse's text, cells cut at
        `max_cell_chars`, under `policy` as `execute`. The stream holds a slot of `owner`'s share (all
        downloads share one) while it runs.

        Raises QueryRefused or EngineError before the first row when the statement cannot run."""
        query_id = new_query_id()
        try:
            async with self.share.slot(owner):
                checked = await self.check(sql, query_id, policy=policy)
                access = await self.row_filters(policy)
                columns = await self._describe(checked, query_id, access)
        except EngineError as exc:
            raise EngineError(await self._cleaned(exc, policy)) from None
        cap = max_cell_chars or self.limits.export_max_cell_chars
        select = rendering.export_select(checked.sql, limit=max_rows, max_cell_chars=cap)
        return Export(columns, self._export_rows(select, query_id, owner, policy, access))

    async def _export_rows(
        self, select: str, query_id: str, owner: str, policy: Policy | None, access: RowFilters | None
    ) -> AsyncGenerator[list[Cell], None]:
        rows = rendering.tsv_rows(self.backend.stream(select, "TabSeparated", query_id, access=access))
        try:
            async with self.share.slot(owner), aclosing(rows):
                async for row in rows:
                    yield row
        except EngineError as exc:  # the engine's text, as every error the agent shows: cleaned
            raise EngineError(await self._cleaned(exc, policy)) from None

    async def _cleaned(self, exc: EngineError, policy: Policy | None) -> str:
        """An engine error as the asker may read it: names outside the policy left out, and under a
        policy no count of what the engine read (it counts the rows the filter hides)."""
        message = clean_error(str(exc), await self._name_filter(policy))
        return message if policy is None else without_read_figures(message, error_code(message))

    async def row_filters(self, policy: Policy | None) -> RowFilters | None:
        """What the engine applies under `policy`: its filters, and no row of the tables in scope it does
        not list (None: no policy, every row in scope)."""
        if policy is None:
            return None
        tables, _ = await self.known_names()
        return RowFilters.of(policy, tables)

    # --- the agent's own SQL ---

    async def catalog_rows(self, sql: str, *, policy: Policy | None = None) -> list[dict[str, Any]]:
        """Rows of a trusted catalog query (never SQL from a model), as JSON objects; under `policy`, the
        engine reads its tables through the policy's row filters (a policy's schema samples its rows only)."""
        try:
            access = await self.row_filters(policy) if policy is not None else None
            raw = await self.backend.query(sql, "JSONEachRow", new_query_id(), access=access)
        except EngineError as exc:
            raise DatabaseUnavailable(f"Could not read the ClickHouse catalog: {clean_error(str(exc), bool)}") from None
        return [json.loads(line) for line in raw.splitlines() if line.strip()]

    async def known_names(self, *, refresh: bool = False, policy: Policy | None = None) -> tuple[list[str], list[str]]:
        """In-scope table names (`db.table`) that `policy` lets read (all without one) and their column
        names, as the schema introspection finds them: the only tables a statement may read, and the
        names "did you mean" hints may offer. Raises DatabaseUnavailable when the catalog cannot be read."""
        if refresh or self._names_stale(_NAMES_TTL_S):
            rows = await self.catalog_rows(
                "SELECT database, table, name FROM system.columns "
                "WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema')"
            )
            visible = [
                (f"{r['database']}.{r['table']}", r["name"])
                for r in rows
                if self.scope.allows(r["database"], r["table"])
            ]
            self._names = (time.monotonic(), visible)
        assert self._names is not None
        tables = set(within_policy(policy, {table for table, _ in self._names[1]}))
        return sorted(tables), sorted({column for table, column in self._names[1] if table in tables})

    def _names_stale(self, age_s: float) -> bool:
        return self._names is None or time.monotonic() - self._names[0] > age_s

    async def _hint_names(self, policy: Policy | None = None) -> tuple[list[str], list[str]]:
        try:
            return await self.known_names(policy=policy)
        except DatabaseUnavailable:
            return [], []

    async def _name_filter(self, policy: Policy | None = None) -> Any:
        tables, columns = await self._hint_names(policy)
        allowed = set(tables) | set(columns) | {t.split(".", 1)[1] for t in tables}

        def may_name(name: str) -> bool:
            return name in allowed or (self.functions.allows(name) and "." not in name)

        return may_name

    # --- health ---

    async def ping(self) -> None:
        try:
            raw = await self.backend.query("SELECT 1", "TSV", new_query_id())
        except EngineError as exc:
            raise DatabaseUnavailable(f"ClickHouse did not answer SELECT 1: {exc}") from None
        if raw.strip() != b"1":
            raise DatabaseUnavailable("ClickHouse did not answer SELECT 1.")

    async def running_queries(self) -> list[str]:
        """Ids of the agent's queries still running in the engine (for tests and health)."""
        return await self.backend.running()

    async def close(self) -> None:
        await self.backend.close()


def _elapsed_ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


async def _off_the_loop_if_large(size: int, work: Callable[..., T], *args: Any) -> T:
    """`work(*args)`, in a thread when its input is large: reading a widest result (17 MB of hex) or
    the parse of a 60,000-character statement (a 1.8 MB AST) takes a few hundred milliseconds of CPU, which
    on the event loop would hold every other request. Small inputs stay on the loop (a thread costs more)."""
    if size < _LARGE_INPUT_BYTES:
        return work(*args)
    return await asyncio.to_thread(work, *args)
