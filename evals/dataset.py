"""The database a run scores against: the embedded demo data (loaded first if it is missing), or the
ClickHouse server CLICKHOUSE_URL names."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from agent.config import Settings
from agent.db import Database, DatabaseUnavailable, open_database
from agent.db.demo import DATABASE
from evals.suite import DEMO, Suite

DEMO_TABLE = f"{DATABASE}.flights"


class DatasetError(Exception):
    """The suites need data this run was not given; the message says what to set."""


async def open_dataset(settings: Settings, suites: Sequence[Suite]) -> Database:
    """An open database for the suites. `dataset: demo` uses the embedded engine in AGENT_DATA_DIR
    (loading the demo data when it is missing) unless CLICKHOUSE_URL names a server; any other
    dataset needs that server."""
    if settings.embedded:
        others = [suite for suite in suites if suite.dataset != DEMO]
        if others:
            raise DatasetError(
                f"{others[0].source}: dataset {others[0].dataset!r} is not the demo data; "
                "set CLICKHOUSE_URL to the ClickHouse server that has it."
            )
    db = open_database(settings)
    if not settings.embedded or await _has_demo(db):
        return db
    await _load_demo(settings)  # idempotent: tables already complete are skipped
    return open_database(settings)


async def _has_demo(db: Database) -> bool:
    """Whether the embedded engine holds the demo data; closes `db` when it does not."""
    try:
        await db.ping()  # fails when the demo database does not exist at all
        tables, _ = await db.known_names()
    except DatabaseUnavailable:
        tables = []
    except BaseException:
        await db.close()
        raise
    if DEMO_TABLE not in tables:
        await db.close()
        return False
    return True


async def _load_demo(settings: Settings) -> None:
    from agent.db.demo import load_demo

    print(f"Loading the demo data into {settings.chdb_path} (once)", file=sys.stderr)
    await asyncio.to_thread(load_demo, settings.chdb_path, lambda line: print(f"  {line}", file=sys.stderr))
