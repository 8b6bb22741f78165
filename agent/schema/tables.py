"""The tables in scope, introspected from the catalog, and their rendering for the prompt.

The rendering is the stable half of the prompt-cache prefix, so it must be byte-identical between
requests: stable ordering, rounded row counts, no timestamps.

Under a policy, only its tables, and what is said of a table's rows (its row count, the sampled values
of its columns) is read through the policy's row filter: the prompt of one policy says nothing about
rows only another may read. Comments are written about the whole warehouse, so they are scrubbed of
the tables the policy cannot read and of the sampled columns' values only its hidden rows hold
(agent/schema/redaction.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from agent.access.policy import Policy
from agent.db import Database, DatabaseUnavailable
from agent.schema.engines import distributed_target, engine_note
from agent.schema.redaction import mentions, scrub

log = logging.getLogger(__name__)

SAMPLE_VALUES = 8
# A filtered table's sampled column with more distinct values than this cannot be told apart from the
# visible ones: every comment of that policy's schema is then dropped.
MAX_DISTINCT_COMPARED = 10_000
_SAMPLED_TYPES = ("LowCardinality(String)", "LowCardinality(Nullable(String))", "Enum8(", "Enum16(")


@dataclass
class Column:
    name: str
    type: str
    comment: str
    samples: list[str] = field(default_factory=list)
    distinct: int | None = None


@dataclass
class Table:
    database: str
    name: str
    engine: str
    comment: str
    sorting_key: str
    total_rows: int | None
    view_query: str
    columns: list[Column] = field(default_factory=list)
    partition_key: str = ""
    primary_key: str = ""  # shown only where it differs from the sorting key
    engine_note: str = ""  # how to read it where a plain reading is wrong (agent/schema/engines.py)
    row_filter: str | None = None  # the policy's filter, which the engine applies to counts and samples

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"


async def introspect(db: Database, policy: Policy | None = None) -> list[Table]:
    """The tables the model may read (the database's scope, and of it the policy's tables), with columns
    and sampled values."""
    table_rows = await db.catalog_rows(
        "SELECT database, name, engine, engine_full, comment, sorting_key, partition_key, primary_key, total_rows, "
        "as_select FROM system.tables WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema') "
        "AND NOT is_temporary ORDER BY database, name"
    )
    every = {(r["database"], r["name"]): r for r in table_rows}
    in_scope = {
        f"{r['database']}.{r['name']}": _table(r, every)
        for r in table_rows
        if db.scope.allows(r["database"], r["name"]) and not r["name"].endswith("__loading")
    }
    tables = in_scope if policy is None else {k: t for k, t in in_scope.items() if policy.readable(t.database, t.name)}
    column_rows = await db.catalog_rows(
        "SELECT database, table, name, type, comment FROM system.columns "
        "WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema') "
        "ORDER BY database, table, position"
    )
    for r in column_rows:
        if (key := f"{r['database']}.{r['table']}") in tables:
            tables[key].columns.append(Column(r["name"], r["type"], r["comment"] or ""))
    if policy is not None:
        for key, table in tables.items():
            table.row_filter = policy.tables[key]
        values = await _hidden_values(db, list(tables.values()), policy)
        _under_policy(tables, hidden=in_scope.keys() - tables.keys(), values=values)
    await asyncio.gather(*(_sample(db, table, policy) for table in tables.values()))
    await asyncio.gather(*(_count_filtered(db, table, policy) for table in tables.values() if table.row_filter))
    return list(tables.values())


def _table(row: dict[str, Any], every: dict[tuple[str, str], dict[str, Any]]) -> Table:
    engine = row["engine"]
    sorting_key = row["sorting_key"] or ""
    note = engine_note(engine, row["engine_full"] or "", sorting_key)
    target = distributed_target(row["engine_full"] or "") if engine == "Distributed" else None
    if target is not None and target in every:
        # The shards' table decides how rows read; its keys are the ones a filter can use.
        local = every[target]
        sorting_key = local["sorting_key"] or ""
        row = {**row, "partition_key": local["partition_key"], "primary_key": local["primary_key"]}
        note = engine_note(local["engine"], local["engine_full"] or "", sorting_key)
        engine = f"Distributed over {local['engine']}"
    primary = row["primary_key"] or ""
    return Table(
        row["database"],
        row["name"],
        engine,
        row["comment"] or "",
        sorting_key,
        None if row["total_rows"] is None else int(row["total_rows"]),
        row["as_select"] if row["engine"].endswith("View") else "",
        partition_key=row["partition_key"] or "",
        primary_key=primary if primary != sorting_key else "",
        engine_note=note,
    )


def _under_policy(tables: dict[str, Table], hidden: Collection[str], values: set[str] | None) -> None:
    """What a policy's people see of its tables: no comment or view definition that mentions a table in
    scope they may not read or a value only its hidden rows hold (None: those values are not known, so no
    comment at all). Counts and samples are read under the policy (`_sample` and `_count_filtered`)."""
    mention = mentions(hidden, values or ())
    for table in tables.values():
        table.comment = scrub(table.comment, mention) if values is not None else ""
        for column in table.columns:
            column.comment = scrub(column.comment, mention) if values is not None else ""
        if mention is not None and mention.search(table.view_query):
            table.view_query = ""


async def _hidden_values(db: Database, tables: list[Table], policy: Policy) -> set[str] | None:
    """The values of the filtered tables' sampled columns that only rows the policy hides hold: each
    column's distinct values read whole and read under the policy (trusted catalog reads). None when
    they cannot be known (a read failed, or a column has too many values to compare)."""
    columns = [(t, c) for t in tables if t.row_filter and not t.view_query for c in t.columns if _sampled(c)]
    reads = await asyncio.gather(
        *(_distinct(db, table, column, under) for table, column in columns for under in (None, policy)),
        return_exceptions=True,
    )
    hidden: set[str] = set()
    for whole, visible in zip(reads[::2], reads[1::2], strict=True):
        if isinstance(whole, BaseException) or isinstance(visible, BaseException):
            failed = whole if isinstance(whole, BaseException) else visible
            log.warning("a policy's schema drops its comments: hidden values unknown (%s)", type(failed).__name__)
            return None
        if len(whole) > MAX_DISTINCT_COMPARED:
            return None
        hidden |= whole - visible
    return hidden


async def _distinct(db: Database, table: Table, column: Column, policy: Policy | None) -> set[str]:
    rows = await db.catalog_rows(
        f"SELECT DISTINCT toString({quote_identifier(column.name)}) AS value FROM {_source(table)} "
        f"ORDER BY value LIMIT {MAX_DISTINCT_COMPARED + 1}",
        policy=policy,
    )
    return {str(row["value"]) for row in rows if row["value"] is not None}


def _sampled(column: Column) -> bool:
    return column.type.startswith(_SAMPLED_TYPES)


def quote_identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


async def _sample(db: Database, table: Table, policy: Policy | None) -> None:
    """The most common values of low-cardinality string columns (exact, so the prompt is stable), of the
    rows the policy reads (the engine applies its filters)."""
    if table.view_query:
        return
    sampled = [c for c in table.columns if _sampled(c)]
    results = await asyncio.gather(
        *(
            db.catalog_rows(
                f"SELECT toString({quote_identifier(c.name)}) AS value, count() AS n, "
                f"count() OVER () AS distinct_values FROM {_source(table)} GROUP BY value ORDER BY n DESC, value "
                f"LIMIT {SAMPLE_VALUES}",
                policy=policy,
            )
            for c in sampled
        ),
        return_exceptions=True,
    )
    for column, rows in zip(sampled, results, strict=True):
        if isinstance(rows, BaseException) or not rows:
            continue
        column.samples = sorted(str(row["value"]) for row in rows if row["value"] is not None)
        column.distinct = int(rows[0]["distinct_values"])


def _source(table: Table) -> str:
    return f"{quote_identifier(table.database)}.{quote_identifier(table.name)}"


async def _count_filtered(db: Database, table: Table, policy: Policy | None) -> None:
    """A filtered table's row count as its policy sees it (the catalog's count is every policy's rows)."""
    if table.view_query:
        table.total_rows = None
        return
    try:
        rows = await db.catalog_rows(f"SELECT count() AS n FROM {_source(table)}", policy=policy)
    except DatabaseUnavailable:  # the prompt does without a count; the catalog's would be a leak
        rows = []
    table.total_rows = int(rows[0]["n"]) if rows else None


def fits(tables: list[Table], max_chars: int) -> bool:
    """Whether every table, whole, fits the budget (then the prompt carries them all)."""
    return sum(len(render_table(t)) + 2 for t in tables) <= max_chars + 2


def render_schema(tables: list[Table]) -> str:
    """Markdown for the prompt, every table whole: the tables with a comment and the most rows first."""
    ordered = sorted(tables, key=lambda t: (not t.comment, -(t.total_rows or 0), t.qualified))
    return "\n\n".join(render_table(table) for table in ordered)


def render_table(table: Table) -> str:
    return "\n".join([table_header(table), *(column_row(column) for column in table.columns)])


def table_header(table: Table) -> str:
    """A table's rendering up to its first column row: name, comment, facts, view, column heading."""
    facts = [table.engine]
    if table.total_rows is not None:
        facts.append(f"~{round_count(table.total_rows)} rows")
    if table.sorting_key:
        facts.append(f"sorted by {table.sorting_key}")
    if table.primary_key:
        facts.append(f"primary key {table.primary_key}")
    if table.partition_key:
        facts.append(f"partitioned by {table.partition_key}")
    lines = [f"## {table.qualified}"]
    if table.comment:
        lines.append(table.comment)
    lines.append(f"({', '.join(facts)})")
    if table.engine_note:
        lines.append(f"Engine note: {table.engine_note}")
    if table.view_query:
        lines += ["", "View definition:", "```sql", table.view_query.strip(), "```"]
    lines += ["", "| column | type | description |", "|---|---|---|"]
    return "\n".join(lines)


def column_row(column: Column) -> str:
    note = column.comment
    if column.samples:
        more = "" if column.distinct is not None and column.distinct <= len(column.samples) else ", …"
        values = ", ".join(column.samples) + more
        note = f"{note}. Values: {values}" if note else f"Values: {values}"
    return f"| {column.name} | {column.type} | {note.replace('|', '/')} |"


def round_count(count: int) -> str:
    if count < 1_000:
        return str(count)
    for divisor, suffix in ((1_000_000_000, "B"), (1_000_000, "M"), (1_000, "K")):
        if count >= divisor:
            value = count / divisor
            return f"{value:.0f}{suffix}" if value >= 10 else f"{value:.1f}{suffix}"
    return str(count)
