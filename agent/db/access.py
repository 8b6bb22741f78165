"""A policy in the engine's terms: the row filter of every table in scope, which the engine applies to
each read of that table (`additional_table_filters`), whatever shape of SQL reads it.

Why the engine and not the SQL: the statement check (agent/db/statement.py) decides what may run, but
a filter written into the model's SQL would have to find every read of a table through joins, CTEs,
subqueries, views and the analyzer's rewrites; ClickHouse applies `additional_table_filters` where it
reads the table's storage, so every shape the check allows sees the same rows. A table the policy does
not list gets the filter `0` (no row) as a second wall behind the check, which already refuses it like
a table that does not exist. `None` (no policy) keeps the agent open to all of its scope, as before.

Why not per-policy ClickHouse users with row policies: the embedded engine (chdb) has no users to give
row policies to, and on a server they would mean one user, password and set of grants per policy, kept
in step with the policy file by hand or by an admin connection the agent should not hold. The filters
travel with the connection (embedded: the connection string of a per-policy pool) or with each request
(server: query settings), before `readonly=1`, after which no `SETTINGS` in a query may change them.
A server user whose profile is itself readonly=1 cannot take them: the agent refuses to start with
policies then (a deployment that prefers row policies uses per-policy users instead).

What ClickHouse does not cover, and so the check refuses under a policy (agent/db/statement.py, all
measured on chdb 26.9 by tests/agent/access/row_isolation.yaml): an explicit PREWHERE runs before the
filter (a throwIf there fires on hidden rows); virtual columns (`_part_offset`, `_part`, ...) and block
functions (`blockSize()`, `neighbor()`, ...) tell where the visible rows sit among the hidden ones, and
`indexHint()` picks granules shared with hidden rows;
`merge()` reads a table past the filter (table functions that name tables are refused anyway). PINNED
below fixes the settings that could answer from part metadata, projections or a cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from agent.access.policy import Policy

DENY_ALL = "0"  # a row filter that keeps no row

# Pinned under a policy, whatever the server's profile or a newer default says: each is a way the
# engine could answer from something other than the filtered rows of the table's own parts.
PINNED: Mapping[str, int] = MappingProxyType(
    {
        "optimize_trivial_count_query": 0,  # count() from the parts' row counts (ClickHouse#11352)
        "optimize_use_projections": 0,  # a projection's own parts instead of the rows (ClickHouse#37454)
        "optimize_use_implicit_projections": 0,  # min/max/count from part metadata (ClickHouse#45133)
        "use_query_cache": 0,  # a result cached under another policy's filters
        "use_query_condition_cache": 0,  # granule verdicts keyed without the row filter (ClickHouse#110302)
        "enable_parallel_replicas": 0,  # followers re-resolve or drop the filters (ClickHouse#104296, #118580)
        "max_parallel_replicas": 1,
    }
)


@dataclass(frozen=True)
class RowFilters:
    """`policy`'s name and the filter of each `db.table` in scope that is not read whole, sorted (so two
    equal policies make one key, and a backend reuses what it built for it)."""

    policy: str
    filters: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, policy: Policy, tables_in_scope: Iterable[str]) -> RowFilters:
        filters: dict[str, str] = {}
        for table in set(tables_in_scope) | set(policy.tables):
            if table not in policy.tables:
                filters[table] = DENY_ALL
            elif (condition := policy.tables[table]) is not None and condition.strip():
                filters[table] = condition
        return cls(policy.name, tuple(sorted(filters.items())))

    @property
    def as_mapping(self) -> Mapping[str, str]:
        return MappingProxyType(dict(self.filters))

    def setting(self) -> str:
        """The value of `additional_table_filters`: a ClickHouse map literal of table -> condition."""
        pairs = ", ".join(f"{_quoted(table)}: {_quoted(condition)}" for table, condition in self.filters)
        return "{" + pairs + "}"


_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _.,()<>!*/-:")


def _quoted(text: str) -> str:
    """A ClickHouse string literal of `text`, every other byte as \\xNN: the value travels in a chdb
    connection string, whose parser splits on `&` even when it is percent-encoded, and in a URL."""
    return "'" + "".join(chr(b) if chr(b) in _PLAIN else f"\\x{b:02X}" for b in text.encode()) + "'"


def policy_key(policy: Policy | None) -> tuple[str, tuple[tuple[str, str | None], ...]] | None:
    """A hashable identity of what a policy lets read (its name alone could be reused by a new file)."""
    if policy is None:
        return None
    return policy.name, tuple(sorted(policy.tables.items(), key=lambda item: item[0]))


def pinned_settings() -> dict[str, int]:
    """Settings sent with every filtered query, fixed whatever the profile says, because each could let
    a read skip the filter or answer from something the filter does not cover (see docs/ARCHITECTURE.md)."""
    return dict(PINNED)


def filtered_settings(settings: Mapping[str, object], access: RowFilters) -> dict[str, object]:
    """The agent's connection settings with `access`'s filters and the pinned settings, `readonly` last:
    once it is 1, nothing later in the connection or a query may change any of them."""
    values = {name: value for name, value in settings.items() if name != "readonly"}
    values.update(pinned_settings())
    values["additional_table_filters"] = access.setting()
    values["readonly"] = 1
    return values


# Limit errors report what the engine read or expects to read before the filter (`current rows: 1.2
# million`), which counts the hidden rows too: under a policy they are told without their figures.
_READ_LIMIT_ERRORS = {158: "TOO_MANY_ROWS", 160: "TOO_SLOW", 307: "TOO_MANY_BYTES"}


def without_read_figures(message: str, code: int | None) -> str:
    """`message` as a person under a policy may read it: a read limit's error without its counts."""
    if code not in _READ_LIMIT_ERRORS:
        return message
    return (
        f"Code: {code}. DB::Exception: The query would read more than the agent's limits allow. "
        f"({_READ_LIMIT_ERRORS[code]})"
    )
