"""The schema section of the system prompt: introspected, rendered deterministically, cached.

The rendering is the stable half of the prompt-cache prefix, so it must be byte-identical between
requests: stable ordering, rounded row counts, no timestamps.
"""

from __future__ import annotations

import asyncio
import fnmatch
import time
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


async def introspect(db: Database, databases: list[str], exclude: list[str] = ()) -> list[Table]:  # type: ignore[assignment]
    tables_result = await db.execute(
        "SELECT database, name, engine, comment, sorting_key, total_rows, as_select FROM system.tables "
        "WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema') "
        "AND NOT is_temporary ORDER BY database, name",
        max_rows=5_000,
    )
    if not tables_result.ok:
        raise RuntimeError(f"Could not read system.tables: {tables_result.error}")
    tables = {
        f"{r[0]}.{r[1]}": Table(r[0], r[1], r[2], r[3] or "", r[4] or "", r[5], r[6] if r[2].endswith("View") else "")
        for r in tables_result.rows
        if _wanted(r[0], r[1], databases, exclude)
    }
    columns_result = await db.execute(
        "SELECT database, table, name, type, comment FROM system.columns "
        "WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema') "
        "ORDER BY database, table, position",
        max_rows=50_000,
    )
    if not columns_result.ok:
        raise RuntimeError(f"Could not read system.columns: {columns_result.error}")
    for database, table, name, type_, comment in columns_result.rows:
        if (key := f"{database}.{table}") in tables:
            tables[key].columns.append(Column(name, type_, comment or ""))
    await asyncio.gather(*(_sample(db, table) for table in tables.values()))
    return list(tables.values())


def _wanted(database: str, table: str, databases: list[str], exclude: list[str]) -> bool:
    if table.endswith("__loading"):
        return False
    if not any(fnmatch.fnmatch(database, pattern) for pattern in databases):
        return False
    return not any(fnmatch.fnmatch(f"{database}.{table}", pattern) for pattern in exclude)


async def _sample(db: Database, table: Table) -> None:
    """The most common values of low-cardinality string columns (exact, so the prompt is stable)."""
    if table.view_query:
        return
    sampled = [c for c in table.columns if c.type.startswith(_SAMPLED_TYPES)]
    results = await asyncio.gather(
        *(
            db.execute(
                f"SELECT `{c.name}` AS value, count() AS n, count() OVER () AS distinct_values "
                f"FROM `{table.database}`.`{table.name}` GROUP BY value ORDER BY n DESC, value "
                f"LIMIT {SAMPLE_VALUES}",
                max_rows=SAMPLE_VALUES,
            )
            for c in sampled
        )
    )
    for column, result in zip(sampled, results, strict=True):
        if result.ok and result.rows:
            column.samples = sorted(str(row[0]) for row in result.rows if row[0] is not None)
            column.distinct = int(result.rows[0][2])


def render_schema(tables: list[Table], max_chars: int) -> str:
    """Markdown for the prompt; whole tables in priority order until the budget, then names only."""
    ordered = sorted(tables, key=lambda t: (not t.comment, -(t.total_rows or 0), t.qualified))
    sections: list[str] = []
    left_out: list[str] = []
    used = 0
    for table in ordered:
        section = _render_table(table)
        if used + len(section) > max_chars and sections:
            left_out.append(table.qualified)
            continue
        sections.append(section)
        used += len(section)
    text = "\n\n".join(sections)
    if left_out:
        text += (
            "\n\nMore tables exist (columns not shown to save space): "
            + ", ".join(sorted(left_out))
            + ".\nRead their columns with `SELECT name, type, comment FROM system.columns "
            "WHERE database = '...' AND table = '...'`."
        )
    return text


def _render_table(table: Table) -> str:
    facts = [table.engine]
    if table.total_rows is not None:
        facts.append(f"~{_round_count(table.total_rows)} rows")
    if table.sorting_key:
        facts.append(f"sorted by {table.sorting_key}")
    lines = [f"## {table.qualified}"]
    if table.comment:
        lines.append(table.comment)
    lines.append(f"({', '.join(facts)})")
    if table.view_query:
        lines += ["", "View definition:", "```sql", table.view_query.strip(), "```"]
    lines += ["", "| column | type | description |", "|---|---|---|"]
    for column in table.columns:
        note = column.comment
        if column.samples:
            more = "" if column.distinct is not None and column.distinct <= len(column.samples) else ", …"
            values = ", ".join(column.samples) + more
            note = f"{note}. Values: {values}" if note else f"Values: {values}"
        lines.append(f"| {column.name} | {column.type} | {note.replace('|', '/')} |")
    return "\n".join(lines)


def _round_count(count: int) -> str:
    if count < 1_000:
        return str(count)
    for divisor, suffix in ((1_000_000_000, "B"), (1_000_000, "M"), (1_000, "K")):
        if count >= divisor:
            value = count / divisor
            return f"{value:.0f}{suffix}" if value >= 10 else f"{value:.1f}{suffix}"
    return str(count)


class SchemaCache:
    """The rendered schema, rebuilt at most once per TTL; concurrent callers share one rebuild."""

    def __init__(self, db: Database, databases: list[str], exclude: list[str], max_chars: int, ttl_s: float) -> None:
        self._db, self._databases, self._exclude = db, databases, exclude
        self._max_chars, self._ttl_s = max_chars, ttl_s
        self._text: str | None = None
        self._built_at = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> str:
        async with self._lock:
            if self._text is None or time.monotonic() - self._built_at > self._ttl_s:
                tables = await introspect(self._db, self._databases, self._exclude)
                self._text = render_schema(tables, self._max_chars)
                self._built_at = time.monotonic()
            return self._text
