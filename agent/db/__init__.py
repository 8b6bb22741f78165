"""ClickHouse access for the agent: read-only, limited, killable, with results capped at N+1 rows."""

from __future__ import annotations

from agent.config import Settings
from agent.db.database import (
    Block,
    Database,
    DatabaseError,
    DatabaseUnavailable,
    QueryLimits,
    new_query_id,
)
from agent.db.guard import QueryRefused, check_statement
from agent.db.result import QueryResult, format_for_model

__all__ = [
    "Block",
    "Database",
    "DatabaseError",
    "DatabaseUnavailable",
    "QueryLimits",
    "QueryRefused",
    "QueryResult",
    "check_statement",
    "format_for_model",
    "new_query_id",
    "open_database",
]


def open_database(settings: Settings) -> Database:
    """The agent's database for these settings: embedded chdb or a server, read-only and limited."""
    limits = QueryLimits.from_settings(settings)
    if settings.embedded:
        from agent.db.embedded import EmbeddedDatabase

        return EmbeddedDatabase(settings.chdb_path, limits)
    from agent.db.server import ServerDatabase

    return ServerDatabase(settings.clickhouse_url, limits)
