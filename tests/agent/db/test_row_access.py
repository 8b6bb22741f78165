"""The engine's side of a policy (agent/db/access.py): its filters as the engine reads them, a table
the policy does not list refused like one that does not exist (and filtered to no row behind the
check), per-policy connections reused, and a server user that cannot take the filters refused."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from agent.access.policy import Policy
from agent.db import Database, DatabaseUnavailable, new_query_id, open_database
from agent.db.access import DENY_ALL, RowFilters
from tests.conftest import make_settings
from tests.fakes.clickhouse_http import FakeClickHouse

JFK = Policy("jfk", MappingProxyType({"nycflights13.flights": "origin = 'JFK'", "nycflights13.airports": None}))
EWR = Policy("ewr", MappingProxyType({"nycflights13.flights": "origin = 'EWR'", "nycflights13.planes": None}))


def test_unlisted_tables_in_scope_get_no_row_and_open_tables_no_filter() -> None:
    filters = RowFilters.of(JFK, ["nycflights13.flights", "nycflights13.airports", "nycflights13.planes"])
    assert dict(filters.filters) == {"nycflights13.flights": "origin = 'JFK'", "nycflights13.planes": DENY_ALL}
    assert filters.setting() == "{'nycflights13.flights': 'origin = \\'JFK\\'', 'nycflights13.planes': '0'}"


async def test_another_policys_table_is_refused_exactly_as_a_missing_one(db: Database) -> None:
    theirs = await db.execute("SELECT count() FROM nycflights13.planes", policy=JFK)
    missing = await db.execute("SELECT count() FROM nycflights13.nonesuch", policy=JFK)
    assert theirs.error == missing.error.replace("nonesuch", "planes") and theirs.error_code == missing.error_code
    assert "planes" not in (theirs.hint or "") and "weather" not in (theirs.hint or "")
    assert (await db.execute("SELECT count() FROM nycflights13.planes", policy=EWR)).rows == [["3322"]]


async def test_behind_the_check_an_unlisted_table_reads_no_row(db: Database) -> None:
    """Defence in depth: run straight on the engine, past the check, policy B's table is empty under A."""
    access = await db.row_filters(JFK)
    raw = await db.backend.query("SELECT count() FROM nycflights13.planes", "TSV", new_query_id(), access=access)
    assert raw.strip() == b"0"
    open_to_all = await db.backend.query("SELECT count() FROM nycflights13.planes", "TSV", new_query_id())
    assert open_to_all.strip() == b"3322"


async def test_each_policy_reuses_its_own_connections(db: Database) -> None:
    before = await _policy_pools(db)
    for policy in (JFK, EWR, JFK, EWR, JFK):
        await db.execute("SELECT count() FROM nycflights13.flights", policy=policy)
    jfk = await db.execute("SELECT origin FROM nycflights13.flights GROUP BY origin", policy=JFK)
    ewr = await db.execute("SELECT origin FROM nycflights13.flights GROUP BY origin", policy=EWR)
    assert jfk.rows == [["JFK"]] and ewr.rows == [["EWR"]]
    assert await _policy_pools(db) - before <= 2


async def _policy_pools(db: Database) -> int:
    header, _ = await db.backend._call({"op": "pools"})  # type: ignore[attr-defined]
    return int(header["policy_pools"])


async def test_a_server_user_that_cannot_set_the_filters_is_refused(server_db: Database) -> None:
    """The shipped agent user's profile is readonly=1: it could not send a policy's filters, so a
    question under a policy fails with what to change, never runs unfiltered."""
    with pytest.raises(DatabaseUnavailable, match="give the agent a user whose profile lets it set readonly"):
        await server_db.execute("SELECT count() FROM nycflights13.flights", policy=JFK)
    assert (await server_db.execute("SELECT count() FROM nycflights13.airlines")).rows == [["16"]]


async def test_with_policies_configured_a_read_only_server_user_is_refused_at_start(
    clickhouse_fake: FakeClickHouse,
) -> None:
    settings = make_settings(clickhouse_url=clickhouse_fake.url("agent", "nycflights13"))
    database = open_database(settings, row_filters=True)
    try:
        with pytest.raises(DatabaseUnavailable, match="per-policy ClickHouse users with row policies"):
            await database.ping()
    finally:
        await database.close()
