"""`agent knowledge check`: every SQL in the knowledge runs through exactly the path the model's SQL
takes (`Database.execute`: ClickHouse parses it, the allow-list and the scope check it, DESCRIBE
resolves its columns, the capped select runs it read-only under the engine's limits), so an unknown
table or column, a refused function or a table outside the scope is an error naming file and line."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from agent.db import Database, QueryResult
from agent.knowledge.files import Entry, statements


@dataclass(frozen=True)
class Problem:
    where: str  # path:line
    entry: str  # the entry's tag
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.entry} {self.message}"


async def check_entries(db: Database, entries: list[Entry]) -> list[Problem]:
    """The problems of every entry's SQL, in the entries' order (empty when all of it runs)."""
    found = await asyncio.gather(*(_check(db, entry) for entry in entries))
    return [problem for problem in found if problem is not None]


async def canonical_sql(db: Database, sql: str) -> tuple[str | None, str | None]:
    """(ClickHouse's canonical text of `sql`, None) when it runs through the model's path, else (None,
    why). The canonical text is what the engine printed back and ran: comments are gone, and a string
    literal's line breaks are escapes, so every line of it is SQL."""
    result = await db.execute(sql, max_rows=1, owner="knowledge-check")
    if not result.ok or not result.ran_sql:
        return None, _problem(result)
    return result.ran_sql, None


async def _check(db: Database, entry: Entry) -> Problem | None:
    """The entry's first problem, if any."""
    for key, sql in statements(entry):
        if sql is None:
            return Problem(entry.where(key), entry.tag, "reads several tables: give `from` (the join).")
        result = await db.execute(sql, max_rows=1, owner="knowledge-check")
        if not result.ok:
            return Problem(entry.where(key), entry.tag, _problem(result))
    return None


def _problem(result: QueryResult) -> str:
    message = " ".join((result.error or "failed").split())
    if result.hint:
        message += f" ({' '.join(result.hint.split())})"
    return message
