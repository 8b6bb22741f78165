"""What a statement would read, before it runs: ClickHouse's own `EXPLAIN ESTIMATE` of the checked
statement (the parts, rows and marks its indexes select per table, from the primary key and partition
pruning, without reading a row), and the keys of the tables it reads.

The statement is the canonical text the statement check allowed (`Database.check`), so the estimate
plans exactly what would run; `EXPLAIN` runs nothing and is allowed under readonly=1.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from agent.access.policy import Policy
from agent.db.backend import EngineError
from agent.db.database import Database, new_query_id

_ESTIMATE_MAX_BYTES = 4 << 20  # one line per table read; a statement the check allows reads far fewer


@dataclass(frozen=True)
class TableRead:
    database: str
    table: str
    parts: int
    rows: int
    marks: int

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.table}"


@dataclass(frozen=True)
class TableKeys:
    sorting_key: str
    partition_key: str
    primary_key: str


async def estimate_reads(
    db: Database, sql: str, *, owner: str | None = None, policy: Policy | None = None
) -> list[TableRead]:
    """The tables `sql` would read and how much of each, as the engine estimates it, checked and planned under
    `policy` as `Database.execute` would run it (its tables only, its row filters). Under a policy only the
    tables it lists: a view it lists whole may read one it does not (whose rows it filters to none), and
    the engine's estimate would name that table and count its rows.

    Raises QueryRefused for a statement the agent may not run, EngineError when the engine cannot
    estimate it (a table function, a syntax error), DatabaseUnavailable when it cannot be reached."""
    query_id = new_query_id()
    async with db.share.slot(owner or query_id):
        checked = await db.check(sql, query_id, policy=policy)
        access = await db.row_filters(policy)
        raw = await db.backend.query(
            f"EXPLAIN ESTIMATE {checked.sql}", "JSONEachRow", query_id, max_bytes=_ESTIMATE_MAX_BYTES, access=access
        )
    try:
        rows = [json.loads(line) for line in raw.splitlines() if line.strip()]
        reads = [
            TableRead(str(r["database"]), str(r["table"]), int(r["parts"]), int(r["rows"]), int(r["marks"]))
            for r in rows
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise EngineError(f"EXPLAIN ESTIMATE returned what this code cannot read ({type(exc).__name__})") from None
    return reads if policy is None else [read for read in reads if read.qualified in policy.tables]


async def table_keys(db: Database, tables: Iterable[str]) -> dict[str, TableKeys]:
    """The sorting, partition and primary keys of these `db.table`s (trusted catalog SQL; the names come
    from the engine's own estimate of a statement the check allowed)."""
    pairs = sorted({tuple(name.split(".", 1)) for name in tables if "." in name})
    if not pairs:
        return {}
    wanted = ", ".join(f"({_literal(database)}, {_literal(table)})" for database, table in pairs)
    rows = await db.catalog_rows(
        "SELECT database, name, sorting_key, partition_key, primary_key FROM system.tables "
        f"WHERE (database, name) IN ({wanted})"
    )
    return {
        f"{r['database']}.{r['name']}": TableKeys(
            r["sorting_key"] or "", r["partition_key"] or "", r["primary_key"] or ""
        )
        for r in rows
    }


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
