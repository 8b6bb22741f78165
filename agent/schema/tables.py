"""The tables in scope, introspected from the catalog, and their rendering for the prompt.

The rendering is the stable half of the prompt-cache prefix, so it must be byte-identical between
requests: stable ordering, rounded row counts, no timestamps.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from agent.db import Database

SAMPLE_VALUES = 8
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

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"


async def introspect(db: Database) -> list[Table]:
    """The tables the model may read (the database's scope), with columns and sampled values."""
    table_rows = await db.catalog_rows(
        "SELECT database, name, engine, comment, sorting_key, total_rows, as_select FROM system.tables "
        "WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema') "
        "AND NOT is_temporary ORDER BY database, name"
    )
    tables = {
        f"{r['database']}.{r['name']}": Table(
            r["database"],
            r["name"],
            r["engine"],
            r["comment"] or "",
            r["sorting_key"] or "",
            None if r["total_rows"] is None else int(r["total_rows"]),
            r["as_select"] if r["engine"].endswith("View") else "",
        )
        for r in table_rows
        if db.scope.allows(r["database"], r["name"]) and not r["name"].endswith("__loading")
    }
    column_rows = await db.catalog_rows(
        "SELECT database, table, name, type, comment FROM system.columns "
        "WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema') "
        "ORDER BY database, table, position"
    )
    for r in column_rows:
        if (key := f"{r['database']}.{r['table']}") in tables:
            tables[key].columns.append(Column(r["name"], r["type"], r["comment"] or ""))
    await asyncio.gather(*(_sample(db, table) for table in tables.values()))
    return list(tables.values())


def quote_identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


async def _sample(db: Database, table: Table) -> None:
    """The most common values of low-cardinality string columns (exact, so the prompt is stable)."""
    if table.view_query:
        return
    sampled = [c for c in table.columns if c.type.startswith(_SAMPLED_TYPES)]
    source = f"{quote_identifier(table.database)}.{quote_identifier(table.name)}"
    results = await asyncio.gather(
        *(
            db.catalog_rows(
                f"SELECT toString({quote_identifier(c.name)}) AS value, count() AS n, "
                f"count() OVER () AS distinct_values FROM {source} GROUP BY value ORDER BY n DESC, value "
                f"LIMIT {SAMPLE_VALUES}"
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
    lines = [f"## {table.qualified}"]
    if table.comment:
        lines.append(table.comment)
    lines.append(f"({', '.join(facts)})")
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
