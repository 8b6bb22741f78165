"""The tables in scope, introspected from the catalog, and their rendering for the prompt.

The rendering is the stable half of the prompt-cache prefix, so it must be byte-identical between
requests: stable ordering, rounded row counts, no timestamps.

Under a policy, only its tables, and what is said of a table's rows (its row count, the sampled values
of its columns) is read through the policy's row filter: the prompt of one policy says nothing about
rows only another may read.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

from agent.access.policy import Policy
from agent.db import Database, DatabaseUnavailable

SAMPLE_VALUES = 8
_PARENTHESISED = re.compile(r"\s*\([^()]*\)")
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
    row_filter: str | None = None  # the policy's filter: row counts and samples are read through it

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"


async def introspect(db: Database, policy: Policy | None = None) -> list[Table]:
    """The tables the model may read (the database's scope, and of it the policy's tables), with columns
    and sampled values."""
    table_rows = await db.catalog_rows(
        "SELECT database, name, engine, comment, sorting_key, total_rows, as_select FROM system.tables "
        "WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema') "
        "AND NOT is_temporary ORDER BY database, name"
    )
    in_scope = {
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
        _under_policy(tables, policy, hidden=in_scope.keys() - tables.keys())
    await asyncio.gather(*(_sample(db, table) for table in tables.values()))
    await asyncio.gather(*(_count_filtered(db, table) for table in tables.values() if table.row_filter))
    return list(tables.values())


def _under_policy(tables: dict[str, Table], policy: Policy, hidden: set[str]) -> None:
    """What a policy's people see of its tables: counts and samples through its filters (set here, read
    by `_sample` and `_count_filtered`), and no comment or view definition that names a table in scope
    they may not read."""
    naming = _naming(hidden)
    for key, table in tables.items():
        table.row_filter = policy.tables[key]
        if naming is None:
            continue
        table.comment = _without_names(table.comment, naming)
        for column in table.columns:
            column.comment = _without_names(column.comment, naming)
        if naming.search(table.view_query):
            table.view_query = ""


def _naming(hidden: set[str]) -> re.Pattern[str] | None:
    """A mention of one of the tables: `db.table`, or `table.column` as comments write joins."""
    if not hidden:
        return None
    qualified = "|".join(map(re.escape, sorted(hidden, key=len, reverse=True)))
    bare = "|".join(map(re.escape, sorted({t.split(".", 1)[1] for t in hidden}, key=len, reverse=True)))
    return re.compile(rf"(?<![\w.])(?:(?:{qualified})(?!\w)|(?:{bare})\.\w)", re.IGNORECASE)


def _without_names(comment: str, naming: re.Pattern[str]) -> str:
    """A comment without its parenthesised remarks that name a hidden table (`(joins planes.tailnum)`);
    none at all when it still names one."""
    kept = _PARENTHESISED.sub(lambda found: "" if naming.search(found.group(0)) else found.group(0), comment).strip()
    return "" if naming.search(kept) else kept


def quote_identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


async def _sample(db: Database, table: Table) -> None:
    """The most common values of low-cardinality string columns (exact, so the prompt is stable)."""
    if table.view_query:
        return
    sampled = [c for c in table.columns if c.type.startswith(_SAMPLED_TYPES)]
    results = await asyncio.gather(
        *(
            db.catalog_rows(
                f"SELECT toString({quote_identifier(c.name)}) AS value, count() AS n, "
                f"count() OVER () AS distinct_values FROM {_source(table)} GROUP BY value ORDER BY n DESC, value "
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


def _source(table: Table) -> str:
    """The table as a FROM clause, through its row filter when it has one (checked safe at start-up by
    `agent access check`'s rules: one boolean expression over the table's columns)."""
    name = f"{quote_identifier(table.database)}.{quote_identifier(table.name)}"
    return f"{name} WHERE ({table.row_filter}\n)" if table.row_filter else name


async def _count_filtered(db: Database, table: Table) -> None:
    """A filtered table's row count as its policy sees it (the catalog's count is every policy's rows)."""
    if table.view_query:
        table.total_rows = None
        return
    try:
        rows = await db.catalog_rows(f"SELECT count() AS n FROM {_source(table)}")
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
    for column in table.columns:
        note = column.comment
        if column.samples:
            more = "" if column.distinct is not None and column.distinct <= len(column.samples) else ", …"
            values = ", ".join(column.samples) + more
            note = f"{note}. Values: {values}" if note else f"Values: {values}"
        lines.append(f"| {column.name} | {column.type} | {note.replace('|', '/')} |")
    return "\n".join(lines)


def round_count(count: int) -> str:
    if count < 1_000:
        return str(count)
    for divisor, suffix in ((1_000_000_000, "B"), (1_000_000, "M"), (1_000, "K")):
        if count >= divisor:
            value = count / divisor
            return f"{value:.0f}{suffix}" if value >= 10 else f"{value:.1f}{suffix}"
    return str(count)
