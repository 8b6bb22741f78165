"""ClickHouse access for the agent: checked by ClickHouse's own parser, read-only and limited at the
engine, scoped to the configured tables, values as ClickHouse prints them, N+1 rows."""

from __future__ import annotations

from typing import Any

from agent.config import Settings
from agent.db.backend import Backend, DatabaseUnavailable, EngineError, EngineRestarted, ResultTooLarge
from agent.db.database import Database, new_query_id
from agent.db.export import Column, Export, csv_chunks, started
from agent.db.functions import load_policy
from agent.db.result import QueryResult, format_for_model
from agent.db.scope import Scope
from agent.db.statement import CheckedStatement, QueryRefused
from agent.limits import Limits

__all__ = [
    "Backend",
    "CheckedStatement",
    "Column",
    "Database",
    "DatabaseUnavailable",
    "EngineError",
    "EngineRestarted",
    "Export",
    "QueryRefused",
    "QueryResult",
    "ResultTooLarge",
    "Scope",
    "csv_chunks",
    "engine_settings",
    "format_for_model",
    "new_query_id",
    "open_database",
    "started",
]


def engine_settings(settings: Settings, scope: Scope) -> dict[str, Any]:
    """Settings of the agent's connections. `readonly` comes last: once it is 1, the engine refuses
    any further setting change in the same request or session."""
    values: dict[str, Any] = {
        "max_execution_time": settings.max_execution_time,
        "max_rows_to_read": settings.max_rows_to_read,
        "max_bytes_to_read": settings.max_bytes_to_read,
        "max_result_rows": settings.max_result_rows,
        "max_result_bytes": settings.max_result_bytes,
        "result_overflow_mode": "break",
        "max_memory_usage": settings.max_memory_usage,
        # How names resolve, which the statement check models (agent/db/union_with.py): pinned, not inherited
        "enable_analyzer": 1,
        "enable_global_with_statement": 1,
    }
    if scope.current_database != "default":
        values["database"] = scope.current_database
    values["readonly"] = 1
    return values


def open_database(settings: Settings, *, row_filters: bool = False) -> Database:
    """The agent's database for these settings: embedded engine or a server, read-only and limited.
    `row_filters`: access policies are configured, so a server user that cannot take their filters with
    each query (a readonly=1 profile) is refused at start-up."""
    scope = Scope.of(settings.clickhouse_databases, settings.clickhouse_exclude_tables)
    limits = Limits.of(settings)
    backend: Backend
    if settings.embedded:
        from agent.db.embedded import EmbeddedBackend

        backend = EmbeddedBackend(
            settings.chdb_path,
            engine_settings(settings, scope),
            sandbox=settings.clickhouse_sandbox,
            pool_size=limits.max_concurrent_queries,
        )
    else:
        from agent.db.server import ServerBackend

        backend = ServerBackend(
            settings.clickhouse_url, engine_settings(settings, scope), scope, row_filters=row_filters
        )
    return Database(
        backend,
        scope=scope,
        functions=load_policy(),
        max_rows=settings.max_rows,
        max_cell_chars=settings.max_cell_chars,
        limits=limits,
    )
