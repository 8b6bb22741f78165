"""The schema the prompt carries, rebuilt at most once per TTL: every table whole when they fit the
budget, otherwise the catalogue and the lookup behind the `lookup_schema` tool. One per policy: each
policy's people see only its tables (and its rows' counts and values), each in a prefix of its own that
stays byte-identical between its questions."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from functools import partial

from agent.access.policy import Policy
from agent.db import Database
from agent.schema.catalog import Catalog
from agent.schema.tables import Table, fits, introspect, render_schema

DEFAULT_CATALOGUE_CHARS = 16_000
PolicyKey = tuple[str, tuple[tuple[str, str | None], ...]]


def policy_key(policy: Policy) -> PolicyKey:
    """What a policy lets read, as a key: two files that reuse a name for other tables make two views."""
    return policy.name, tuple(sorted(policy.tables.items(), key=lambda item: item[0]))


@dataclass(frozen=True)
class SchemaView:
    text: str  # the schema section of the prompt (byte-identical between builds of the same schema)
    catalog: Catalog | None  # None: every table is in the prompt whole, and there is no lookup tool
    complete: bool  # every table in scope is named in the prompt
    tables: int


def build_view(tables: list[Table], *, max_chars: int, catalogue_chars: int, current_database: str) -> SchemaView:
    if fits(tables, max_chars):
        return SchemaView(render_schema(tables), None, True, len(tables))
    catalog = Catalog(tables, current_database)
    catalogue = catalog.render(catalogue_chars)
    return SchemaView(catalogue.text, catalog, catalogue.complete, len(tables))


class SchemaCache:
    """The schema view, rebuilt at most once per TTL; concurrent callers share one rebuild."""

    def __init__(
        self,
        db: Database,
        max_chars: int,
        ttl_s: float,
        catalogue_chars: int = DEFAULT_CATALOGUE_CHARS,
        *,
        policy: Policy | None = None,
    ) -> None:
        self._db = db
        self._max_chars, self._ttl_s, self._catalogue_chars = max_chars, ttl_s, catalogue_chars
        self.policy = policy  # None: every table in scope, every row
        self._per_policy: dict[PolicyKey, SchemaCache] = {}
        self._view: SchemaView | None = None
        self._counting: asyncio.Task[int] | None = None
        self._built_at = 0.0
        self._lock = asyncio.Lock()

    def for_policy(self, policy: Policy | None) -> SchemaCache:
        """The schema `policy`'s people see (this one for None), built once per TTL like this one."""
        if policy is None:
            return self
        key = policy_key(policy)
        if (cache := self._per_policy.get(key)) is None:
            cache = self._per_policy[key] = SchemaCache(
                self._db, self._max_chars, self._ttl_s, self._catalogue_chars, policy=policy
            )
        return cache

    async def view(self) -> SchemaView:
        async with self._lock:
            if self._view is None or time.monotonic() - self._built_at > self._ttl_s:
                tables = await introspect(self._db, self.policy)
                # Off the loop: indexing 5,000 tables takes most of a second of CPU (make bench).
                self._view = await asyncio.to_thread(
                    partial(
                        build_view,
                        tables,
                        max_chars=self._max_chars,
                        catalogue_chars=self._catalogue_chars,
                        current_database=self._db.scope.current_database,
                    )
                )
                self._built_at = time.monotonic()
            return self._view

    async def tables_in_scope(self) -> list[str]:
        """Every table in scope (`db.table`), whatever the policy: what another policy's prompt must not name."""
        return (await self._db.known_names())[0]

    async def get(self) -> str:
        return (await self.view()).text

    async def table_count(self) -> int:
        """Tables in scope (building the schema if it is not built yet)."""
        return (await self.view()).tables

    def counting(self) -> asyncio.Task[int]:
        """`table_count` as one task that callers share and may stop waiting for without cancelling it
        (a health probe that gives up must not restart a slow catalog read each time)."""
        if self._counting is None or self._counting.done():
            self._counting = asyncio.ensure_future(self.table_count())
        return self._counting
