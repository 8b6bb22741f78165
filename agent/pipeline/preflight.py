"""The preflight: before a query of the model's runs, ClickHouse estimates what it would read
(`EXPLAIN ESTIMATE`, agent/db/estimate.py). A query estimated past the threshold (MAX_ESTIMATED_ROWS,
at most the engine's own MAX_ROWS_TO_READ) is not run: the limits would kill it after it had held a
connection for its whole time budget. The model is told instead which key and partition filters
would narrow it (prompts/loop/preflight.md).

An estimate the engine cannot make (a table function, a query the check refuses, an engine error)
lets the query run: the run says what is wrong, as it always has. Each preflight is counted by
outcome (`agent_sql_preflights_total`: passed, stopped, unavailable, filtered).

Under a policy that filters a table the statement reads, the preflight decides nothing ("filtered"): the
engine estimates by granules, which hold the rows the filter hides as well as the visible ones, so a
"Not run" (and narrowing until it runs) would measure the hidden rows. The engine's own limits still
apply to what runs (docs/SECURITY.md). A table the policy does not list is never estimated or named.
"""

from __future__ import annotations

import logging
import time

from agent.access.policy import Policy
from agent.db import Database, DatabaseUnavailable, EngineError, QueryRefused, QueryResult
from agent.db.estimate import TableRead, estimate_reads, table_keys
from agent.metrics import Metrics
from agent.prompts import PromptLibrary

log = logging.getLogger(__name__)


class Preflight:
    def __init__(self, db: Database, prompts: PromptLibrary, max_rows: int | None) -> None:
        self._db = db
        self._prompts = prompts
        self._max_rows = max_rows  # None or 0: no preflight
        self._engine_limit: int | None = None  # max_rows_to_read on the agent's connection, once read

    async def threshold(self) -> int:
        """The setting's threshold, or the connection's own max_rows_to_read when that is lower (a server
        profile may cap it below the agent's setting, agent/db/profile.py): a scan past it would be killed."""
        if not self._max_rows:
            return 0
        if self._engine_limit is None:
            try:
                [row] = await self._db.catalog_rows("SELECT toUInt64(getSetting('max_rows_to_read')) AS n")
                self._engine_limit = int(row["n"])
            except (DatabaseUnavailable, ValueError, KeyError):
                return self._max_rows  # read again next time
        return min(self._max_rows, self._engine_limit) if self._engine_limit > 0 else self._max_rows

    async def stopped(
        self, sql: str, query_id: str, owner: str, metrics: Metrics, policy: Policy | None = None
    ) -> QueryResult | None:
        """None when the query may run; otherwise the result the model gets instead of running it."""
        limit = await self.threshold()
        if not limit:
            return None
        started = time.perf_counter()
        try:
            reads = await estimate_reads(self._db, sql, owner=owner, policy=policy)
        except (QueryRefused, EngineError, DatabaseUnavailable) as exc:
            log.debug("no estimate for %s: %s", query_id, type(exc).__name__)
            metrics.sql_preflights.labels("unavailable").inc()
            return None
        if policy is not None and any(policy.tables.get(read.qualified) is not None for read in reads):
            metrics.sql_preflights.labels("filtered").inc()
            return None
        estimated = sum(read.rows for read in reads)
        if estimated <= limit:
            metrics.sql_preflights.labels("passed").inc()
            return None
        metrics.sql_preflights.labels("stopped").inc()
        message = await self._narrowing(reads, estimated, limit)
        return QueryResult(
            query_id=query_id, sql=sql, error=message, elapsed_ms=round((time.perf_counter() - started) * 1000)
        )

    async def _narrowing(self, reads: list[TableRead], estimated: int, limit: int) -> str:
        biggest = sorted(reads, key=lambda read: -read.rows)
        try:
            keys = await table_keys(self._db, (read.qualified for read in biggest))
        except DatabaseUnavailable:
            keys = {}
        tables = [
            {
                "name": read.qualified,
                "rows": f"{read.rows:,}",
                "parts": read.parts,
                "sorting_key": keys[read.qualified].sorting_key if read.qualified in keys else "",
                "partition_key": keys[read.qualified].partition_key if read.qualified in keys else "",
            }
            for read in biggest
        ]
        return self._prompts.render("loop/preflight.md", estimated=f"{estimated:,}", limit=f"{limit:,}", tables=tables)
