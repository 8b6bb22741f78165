"""Which tables the model may read: the configured databases minus the excluded tables, and a few
system tables that only generate rows, and of those only the ones the asker's policy lists.
Everything else is refused like a write (another policy's table like one that does not exist), and
never named back to the model."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agent.access.policy import Policy

# System tables that only generate rows; no catalogue, setting or other session is readable.
ALWAYS_READABLE = frozenset({"system.one", "system.numbers", "system.numbers_mt", "system.zeros", "system.zeros_mt"})


@dataclass(frozen=True)
class Scope:
    databases: tuple[str, ...]  # glob patterns
    excluded: tuple[str, ...] = ()  # db.table glob patterns
    current_database: str = "default"

    @classmethod
    def of(cls, databases: Sequence[str], excluded: Sequence[str] = ()) -> Scope:
        return cls(tuple(databases), tuple(excluded), default_database(databases))

    def database_in_scope(self, database: str) -> bool:
        return any(fnmatch.fnmatchcase(database, pattern) for pattern in self.databases)

    def allows(self, database: str, table: str) -> bool:
        qualified = f"{database}.{table}"
        if qualified in ALWAYS_READABLE:
            return True
        if database.lower() in ("system", "information_schema"):
            return False
        if not self.database_in_scope(database):
            return False
        return not any(fnmatch.fnmatchcase(qualified, pattern) for pattern in self.excluded)

    def resolve(self, parts: Sequence[str]) -> tuple[str, str] | None:
        """(database, table) for a table reference's name parts, or None when it is not a table name."""
        if len(parts) == 1:
            return self.current_database, parts[0]
        if len(parts) == 2:
            return parts[0], parts[1]
        return None


def within_policy(policy: Policy | None, tables_in_scope: Iterable[str]) -> list[str]:
    """The tables in scope that `policy` lets read (all of them without a policy). The statement check
    knows only these, so another policy's table is refused exactly as a table that does not exist, and
    hints and cleaned errors name only these."""
    if policy is None:
        return sorted(tables_in_scope)
    return sorted(t for t in tables_in_scope if policy.readable(*t.split(".", 1)))


def default_database(databases: Sequence[str]) -> str:
    """The session's default database: the configured one when exactly one is configured, so the
    model (and people) can write unqualified table names."""
    literal = [d for d in databases if not any(ch in d for ch in "*?[")]
    return literal[0] if len(databases) == 1 and literal else "default"
