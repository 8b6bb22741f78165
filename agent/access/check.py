"""The policy file checked against the warehouse, at start-up and by `agent access check`: every table a
policy names is one the agent can read (in `CLICKHOUSE_DATABASES`, not excluded, existing), and every row
filter is one the engine accepts as a safe boolean expression over its table (`agent/db/row_filter.py`,
passed in: the engine's package builds on this one, not the other way round). Each problem is one line
naming the file and line."""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Awaitable, Callable, Collection

from agent.access.files import PolicyFile

FilterCheck = Callable[[str, str], Awaitable[str | None]]  # (db.table, filter) -> why not, or None


async def problems_of(policy_file: PolicyFile, tables: Collection[str], filter_problem: FilterCheck) -> list[str]:
    """Every problem of the file's tables and filters, in file order (empty when all of them hold)."""
    found: list[tuple[int, str]] = []
    checks: list[tuple[int, str, Awaitable[str | None]]] = []
    for policy in (*policy_file.policies.policies, policy_file.policies.default):
        for table, condition in policy.tables.items():
            where = policy_file.where(policy.name, table)
            line = policy_file.table_lines.get((policy.name, table), 1)
            if table not in tables:
                found.append((line, f"{where}: policy {policy.name}: {_unknown(table, tables)}"))
            elif condition is not None:
                what = f"{where}: policy {policy.name}: the row filter of {table}"
                checks.append((line, what, filter_problem(table, condition)))
    verdicts = await asyncio.gather(*(check for _, _, check in checks))
    found += [(line, f"{what}: {why}") for (line, what, _), why in zip(checks, verdicts, strict=True) if why]
    return [problem for _, problem in sorted(found, key=lambda pair: pair[0])]


def _unknown(table: str, tables: Collection[str]) -> str:
    similar = difflib.get_close_matches(table, list(tables), n=1)
    hint = f" (did you mean {similar[0]}?)" if similar else ""
    return f"unknown table {table}: not one the agent can read{hint}"
