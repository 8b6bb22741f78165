"""The agent's one way into ClickHouse: check, cap, run, render, and turn failures into hints.

For SQL a model wrote, every statement the engine runs is built here around the canonical text
ClickHouse itself printed and the check approved (agent/db/statement.py): parse, describe, then the
capped select that renders cells in the engine (agent/db/rendering.py). Backends only move bytes.
Trusted SQL of the agent's own (schema introspection) goes through `catalog_rows`, never through
`execute`.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import OrderedDict
from typing import Any

from agent.db import rendering
from agent.db.backend import Backend, DatabaseUnavailable, EngineError
from agent.db.export import Column, Export
from agent.db.functions import FunctionPolicy
from agent.db.hints import clean_error, error_code, hint_for
from agent.db.result import QueryResult
from agent.db.scope import Scope
from agent.db.statement import (
    READ_ONLY,
    CheckedStatement,
    QueryRefused,
    StatementPolicy,
    decode_parse,
    parse_request,
    precheck,
)

MAX_COLUMNS = 200
EXPORT_MAX_CELL_CHARS = 100_000  # a download carries whole values, within reason
EXPORT_MAX_BYTES = 200_000_000
log = logging.getLogger(__name__)
_CHECK_CACHE_SIZE = 512
_NAMES_TTL_S = 300.0


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
    ) -> None:
        self.backend = backend
        self.scope = scope
        self.functions = functions
        self.max_rows = max_rows
        self.max_cell_chars = max_cell_chars
        self._policy = StatementPolicy(scope, functions)
        self._checked: OrderedDict[str, CheckedStatement] = OrderedDict()
        self._names: tuple[float, list[str], list[str]] | None = None

    # --- SQL a model wrote ---

    async def execute(self, sql: str, *, max_rows: int | None = None, query_id: str | None = None) -> QueryResult:
        """Run one statement and return at most `max_rows` rows plus a has_more flag.

        A refusal or an engine error comes back inside the result (with a hint); an unreachable
        database raises DatabaseUnavailable. Cancelling the awaiting task kills the query.
        """
        query_id = query_id or new_query_id()
        limit = max_rows or self.max_rows
        started = time.perf_counter()
        try:
            checked = await self.check(sql, query_id)
            columns = await self._describe(checked, query_id)
            raw = await self.backend.query(
                rendering.capped_select(checked.sql, limit=limit + 1, max_cell_chars=self.max_cell_chars),
                "JSONCompact",
                query_id,
            )
            rendered = rendering.parse_compact(raw)
        except QueryRefused as exc:
            return QueryResult(query_id=query_id, sql=sql, error=str(exc), elapsed_ms=_elapsed_ms(started))
        except (ValueError, UnicodeError) as exc:  # a result this code could not read: never crash the run
            log.exception("could not read the result of %s", query_id)
            error = f"The result could not be read ({type(exc).__name__}); try selecting simpler values."
            return QueryResult(query_id=query_id, sql=sql, error=error, elapsed_ms=_elapsed_ms(started))
        except EngineError as exc:
            message = clean_error(str(exc), await self._name_filter())
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
            ran_sql=checked.sql,
            columns=[c.name for c in columns],
            types=[c.type for c in columns],
            rows=rendered.rows[:limit],
            totals=rendered.totals if checked.with_totals else None,
            has_more=len(rendered.rows) > limit,
            elapsed_ms=_elapsed_ms(started),
        )

    async def check(self, sql: str, query_id: str | None = None) -> CheckedStatement:
        """The canonical statement ClickHouse parsed from `sql`, if the agent may run it.

        Raises QueryRefused, or EngineError for SQL ClickHouse cannot parse."""
        precheck(sql)
        cached = self._checked.get(sql)
        if cached is not None:
            self._checked.move_to_end(sql)
            return cached
        try:
            raw = await self.backend.query(parse_request(sql), "JSONCompactEachRow", query_id or new_query_id())
        except EngineError as exc:
            if "does not support JSON serialization" in str(exc):  # DESCRIBE, EXISTS, SHOW ...
                raise QueryRefused(READ_ONLY) from None
            raise
        try:
            canonical_hex, ast_hex = json.loads(raw)
            checked = self._policy.check(*decode_parse(canonical_hex, ast_hex))
        except (ValueError, TypeError):
            raise QueryRefused("The statement could not be checked.") from None
        except RecursionError:
            raise QueryRefused("The SQL is nested too deeply to check; write it more simply.") from None
        self._checked[sql] = checked
        if len(self._checked) > _CHECK_CACHE_SIZE:
            self._checked.popitem(last=False)
        return checked

    async def _describe(self, checked: CheckedStatement, query_id: str) -> list[Column]:
        raw = await self.backend.query(rendering.describe(checked.sql), "JSONCompactEachRow", query_id)
        lines = raw.decode("utf-8", errors="replace").splitlines()  # names and types may hold any bytes
        columns = [Column(row[0], row[1]) for row in map(json.loads, lines) if row]
        if len(columns) > MAX_COLUMNS:
            raise QueryRefused(f"The query returns {len(columns)} columns; select at most {MAX_COLUMNS}.")
        return columns

    async def export(self, sql: str, *, max_rows: int, query_id: str | None = None) -> Export:
        """All rows (up to `max_rows`) of a statement, streamed as ClickHouse's text.

        Raises QueryRefused or EngineError before the first row when the statement cannot run."""
        query_id = query_id or new_query_id()
        try:
            checked = await self.check(sql, query_id)
            columns = await self._describe(checked, query_id)
        except EngineError as exc:
            raise EngineError(clean_error(str(exc), await self._name_filter())) from None
        select = rendering.export_select(checked.sql, limit=max_rows, max_cell_chars=EXPORT_MAX_CELL_CHARS)
        chunks = self.backend.stream(select, "TabSeparated", query_id)
        return Export(columns, rendering.tsv_rows(rendering.bounded(chunks, EXPORT_MAX_BYTES)))

    # --- the agent's own SQL ---

    async def catalog_rows(self, sql: str) -> list[dict[str, Any]]:
        """Rows of a trusted catalog query (never SQL from a model), as JSON objects."""
        try:
            raw = await self.backend.query(sql, "JSONEachRow", new_query_id())
        except EngineError as exc:
            raise DatabaseUnavailable(f"Could not read the ClickHouse catalog: {clean_error(str(exc), bool)}") from None
        return [json.loads(line) for line in raw.splitlines() if line.strip()]

    async def known_names(self) -> tuple[list[str], list[str]]:
        """In-scope table names (`db.table`) and their column names, for "did you mean" hints."""
        if self._names is None or time.monotonic() - self._names[0] > _NAMES_TTL_S:
            try:
                rows = await self.catalog_rows(
                    "SELECT database, table, name FROM system.columns "
                    "WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema')"
                )
            except DatabaseUnavailable:
                return [], []
            visible = [r for r in rows if self.scope.allows(r["database"], r["table"])]
            tables = sorted({f"{r['database']}.{r['table']}" for r in visible})
            columns = sorted({r["name"] for r in visible})
            self._names = (time.monotonic(), tables, columns)
        return self._names[1], self._names[2]

    async def _name_filter(self) -> Any:
        tables, columns = await self.known_names()
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
