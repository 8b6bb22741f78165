"""The warehouse's own descriptions of its tables, where it publishes them: the "Agents Schema"
(fivetran/agents_schema, MIT; the `agents-schema` package writes it from a dbt manifest, OSI or LookML)
is a database named `agents` (`AGENTS` elsewhere) in the warehouse itself. Its dbt tables describe
models and their columns (`dbt_model`: name, schema_name, description; `dbt_column`: model_id,
column_name, description), its OSI tables datasets and fields (`osi_dataset`: name, source,
description; `osi_field`: dataset_name, name, description).

Those descriptions join the team's knowledge as notes on the tables and columns they describe
(`KnowledgeBase.join`), after the files' own (a note the files already hold on the same table or
column wins). Only tables in scope get a note: a description of any other table is never read into
the prompt. A dbt model on ClickHouse is the table `schema_name.name` (dbt-clickhouse's schema is the
ClickHouse database); an OSI dataset's `source` names its table, its last two parts `database.table`.

Everything here is the agent's own catalog SQL (never SQL from a model); descriptions are text the
prompt shows as data, one line each, cut to NOTE_MAX_CHARS.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent.db import Database, DatabaseUnavailable
from agent.knowledge.base import KnowledgeBase
from agent.knowledge.files import Entry

log = logging.getLogger(__name__)

DATABASE = "agents"  # matched in any case: AGENTS on warehouses that upper-case names
NOTE_MAX_CHARS = 500
MAX_ROWS = 20_000  # of each table: descriptions beyond it are not read
RETRY_S = 60.0


async def read_agents_schema(db: Database) -> list[Entry]:
    """Notes from the warehouse's Agents Schema on the tables in scope; none when it has none.
    Raises DatabaseUnavailable when the catalog cannot be read."""
    found = await db.catalog_rows(f"SELECT name FROM system.databases WHERE lower(name) = '{DATABASE}' LIMIT 1")
    if not found:
        return []
    database = str(found[0]["name"])
    listed = await db.catalog_rows(f"SELECT name FROM system.tables WHERE database = {_literal(database)}")
    tables = {str(row["name"]).lower(): f"{_identifier(database)}.{_identifier(str(row['name']))}" for row in listed}
    in_scope, columns = await db.known_names()
    scope = _Scope(set(in_scope), set(columns), database)
    entries: list[Entry] = []
    if "dbt_model" in tables:
        models = await _rows(db, tables["dbt_model"], "unique_id, name, schema_name, database_name, description")
        table_of = {str(m["unique_id"]): scope.table(m["schema_name"], m["name"], m["database_name"]) for m in models}
        entries += scope.notes("dbt_model", ((table_of[str(m["unique_id"])], "", m["description"]) for m in models))
        if "dbt_column" in tables:
            rows = await _rows(db, tables["dbt_column"], "model_id, column_name, description")
            cells = ((table_of.get(str(r["model_id"])), r["column_name"], r["description"]) for r in rows)
            entries += scope.notes("dbt_column", cells)
    if "osi_dataset" in tables:
        datasets = await _rows(db, tables["osi_dataset"], "name, source, description")
        table_of = {str(d["name"]): scope.source(d["source"]) for d in datasets}
        entries += scope.notes("osi_dataset", ((table_of[str(d["name"])], "", d["description"]) for d in datasets))
        if "osi_field" in tables:
            rows = await _rows(db, tables["osi_field"], "dataset_name, name, description")
            cells = ((table_of.get(str(r["dataset_name"])), r["name"], r["description"]) for r in rows)
            entries += scope.notes("osi_field", cells)
    return entries


class _Scope:
    """What a description may be about: a table in scope, and a column the schema has."""

    def __init__(self, tables: set[str], columns: set[str], database: str) -> None:
        self._tables, self._columns, self._database = tables, columns, database

    def table(self, schema: Any, name: Any, database: Any) -> str | None:
        for candidate in (f"{schema}.{name}", f"{database}.{name}"):
            if candidate in self._tables:
                return candidate
        return None

    def source(self, source: Any) -> str | None:
        parts = str(source or "").replace("`", "").replace('"', "").split(".")
        candidate = ".".join(parts[-2:])
        return candidate if len(parts) >= 2 and candidate in self._tables else None

    def notes(self, kind: str, cells: Iterable[tuple[str | None, Any, Any]]) -> list[Entry]:
        path = Path(f"{self._database}.{kind}")
        entries = []
        for line, (table, column, description) in enumerate(cells, start=1):
            text = " ".join(str(description or "").split())[:NOTE_MAX_CHARS]
            column = str(column or "")
            if table is None or not text or (column and column not in self._columns):
                continue
            fields = {"table": table, **({"column": column} if column else {}), "note": text}
            entries.append(Entry("notes", f"{table}.{column}" if column else table, fields, path, line))
        return entries


async def _rows(db: Database, table: str, columns: str) -> list[dict[str, Any]]:
    return await db.catalog_rows(f"SELECT {columns} FROM {table} LIMIT {MAX_ROWS}")


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


class AgentsSchema:
    """Joins the warehouse's Agents Schema into a knowledge base, once; a catalog that cannot be read is
    tried again after RETRY_S (the prompt goes on without it meanwhile)."""

    def __init__(self, db: Database, knowledge: KnowledgeBase, retry_s: float = RETRY_S) -> None:
        self._db = db
        self._knowledge = knowledge
        self._retry_s = retry_s
        self._done = False
        self._next_try = 0.0
        self._lock = asyncio.Lock()

    async def join(self) -> None:
        if self._done or time.monotonic() < self._next_try:
            return
        async with self._lock:
            if self._done or time.monotonic() < self._next_try:
                return
            try:
                entries = await read_agents_schema(self._db)
            except DatabaseUnavailable as exc:
                log.warning("the warehouse's Agents Schema could not be read (tried again later): %s", exc)
                self._next_try = time.monotonic() + self._retry_s
                return
            joined = self._knowledge.join(entries)
            if joined:
                log.info("joined %d notes from the warehouse's Agents Schema to the team's knowledge", joined)
            self._done = True
