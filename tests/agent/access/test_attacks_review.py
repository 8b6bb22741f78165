"""An outside review's attacks on row isolation (policy A must learn nothing of policy B's rows or tables).

Each test asserts the SAFE behaviour, so each fails while the leak it demonstrates is there. Policy A
(JFK) reads flights where origin = 'JFK' and airports whole; B's rows are the other flights, B's tables
(planes, weather, ...) are not A's."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from types import MappingProxyType
from typing import Any

import pytest

from agent.access.policy import Policy
from agent.db import Database, open_database
from agent.db.embedded import engine_environment
from agent.db.estimate import estimate_reads
from agent.schema.cache import SchemaCache
from tests.conftest import Recorder, make_settings
from tests.demo_data import copy_demo
from tests.fakes.anthropic_api import FakeAnthropic, Reply

JFK_ONLY = Policy(
    "jfk",
    MappingProxyType({"nycflights13.flights": "origin = 'JFK'", "nycflights13.airports": None}),
)
ALL_FLIGHTS = 336_776
# A filter off the primary key (origin, time_hour): the engine scans every granule, B's rows included.
UA_ONLY = Policy(
    "united",
    MappingProxyType({"nycflights13.flights": "carrier = 'UA'", "nycflights13.airports": None}),
)
UA_ROWS = 58_665


def sql(*queries: tuple[str, str]) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": q, "sql": s} for q, s in queries]})


async def test_the_rows_read_budget_note_does_not_count_the_rows_the_filter_hides(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    """Past AGENT_QUESTION_MAX_ROWS_READ the answer says how many rows the question read: ClickHouse's
    count of what it scanned, B's hidden rows included. The receipt hides that figure under a policy
    (test_policy.py); the budget note must too."""
    fake_anthropic.script(
        Reply(tool_calls=[sql(("All", "SELECT count() FROM nycflights13.flights"))]),
        Reply(text="United had 58,665 departures [Q1]."),
    )
    app = make_app(agent_question_max_rows_read=1_000)
    result = await app.runner.run("Departures?", on_event=Recorder(), followups=False, policy=UA_ONLY)
    assert result.queries[0].result.rows == [[str(UA_ROWS)]]
    read = result.queries[0].result.rows_read
    assert read == ALL_FLIGHTS  # the engine scanned B's rows to find A's: the table's whole size
    assert "stopped early" in result.answer  # the note is there...
    assert f"{read:,}" not in result.answer, result.answer  # ...and must not count B's rows


async def test_the_preflight_decision_does_not_depend_on_rows_off_the_key_filter(
    make_app, fake_anthropic: FakeAnthropic
) -> None:
    """Under a filter off the primary key (carrier = 'UA', 58,665 rows), EXPLAIN ESTIMATE counts every
    granule, B's included: with MAX_ESTIMATED_ROWS at 100,000 a count of A's own rows is "Not run"
    because B has rows, and narrowing by the sorting key (origin, time_hour) until it runs measures B's
    rows per key range. Safe: decided as on data holding only A's rows (58,665 < 100,000: it runs)."""
    fake_anthropic.script(
        Reply(tool_calls=[sql(("All", "SELECT count() FROM nycflights13.flights"))]),
        Reply(text="United [Q1]."),
    )
    app = make_app(max_estimated_rows=100_000)
    result = await app.runner.run("United?", on_event=Recorder(), followups=False, policy=UA_ONLY)
    answer = result.queries[0].result
    assert answer.error is None and answer.rows == [[str(UA_ROWS)]], answer.error


# --- views: a policy lists a view whole; the view reads a table the policy filters or does not list ---

_VIEWS = """
import sys, chdb
c = chdb.connect(sys.argv[1])
c.query("CREATE VIEW nycflights13.per_origin AS SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin")
c.query("CREATE VIEW nycflights13.weather_days AS SELECT origin, toDate(time_hour) AS day FROM nycflights13.weather")
# Comments anyone with DDL rights (or a data pipeline) writes, on a table A reads, naming B's tables in prose.
c.query("ALTER TABLE nycflights13.flights MODIFY COMMENT 'Departures. Hourly conditions live in the weather table.'")
c.query("ALTER TABLE nycflights13.flights COMMENT COLUMN tailnum 'Tail number; look it up in planes'")
c.close()
"""
VIEW_POLICY = Policy(
    "jfk-with-views",
    MappingProxyType(
        {
            "nycflights13.flights": "origin = 'JFK'",
            "nycflights13.airports": None,
            "nycflights13.per_origin": None,
            "nycflights13.weather_days": None,
        }
    ),
)

WHOLE_FLIGHTS_VIEWS = Policy(
    "flights-with-views",
    MappingProxyType({**VIEW_POLICY.tables, "nycflights13.flights": None}),
)


@pytest.fixture(scope="module")
async def views_db(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Database]:
    """The demo data with two views: one over flights (which A reads filtered), one over weather (B's)."""
    data_dir = tmp_path_factory.mktemp("views")
    copy_demo(tmp_path_factory, data_dir / "clickhouse")
    subprocess.run(
        [sys.executable, "-c", _VIEWS, str(data_dir / "clickhouse")],
        check=True,
        env=engine_environment(),
        capture_output=True,
    )
    database = open_database(make_settings(agent_data_dir=data_dir, anthropic_api_key="test-key"))
    yield database
    await database.close()


async def test_the_preflight_never_names_a_table_the_policy_does_not_list(
    make_app, fake_anthropic: FakeAnthropic, views_db: Database
) -> None:
    """A's view weather_days reads weather, B's table (under A its rows are filtered to none: that holds).
    But EXPLAIN ESTIMATE lists every table a statement reads, those inside views included, and the
    preflight's "Not run" message names each with its sorting key and, since A does not filter it (A does
    not list it at all), its row count: B's table's name, keys and size. A's own flights make the
    statement wide enough to be stopped."""
    both = (
        "SELECT count() FROM (SELECT origin FROM nycflights13.flights "
        "UNION ALL SELECT origin FROM nycflights13.weather_days)"
    )
    fake_anthropic.script(
        Reply(tool_calls=[sql(("Days", both))]),
        Reply(text="Done [Q1]."),
    )
    app = make_app(views_db, max_estimated_rows=1_000)
    # Set-up adapted: under a filter on flights the preflight no longer decides at all (the test above), so
    # A reads flights whole here; the view over B's weather is the same.
    result = await app.runner.run("Weather days?", on_event=Recorder(), followups=False, policy=WHOLE_FLIGHTS_VIEWS)
    message = result.queries[0].result.error or ""
    assert message.startswith("Not run")  # stopped on A's own 336,776 estimated rows
    assert not re.search(r"nycflights13\.weather(?!_days)", message), message


async def test_the_estimate_lists_only_the_policys_tables(views_db: Database) -> None:
    """The same, one layer down: estimate_reads under a policy returns a table the policy does not list."""
    reads = await estimate_reads(views_db, "SELECT count() FROM nycflights13.weather_days", policy=VIEW_POLICY)
    named = {read.qualified for read in reads}
    assert named <= set(VIEW_POLICY.tables), named


async def test_the_policys_schema_names_no_table_of_b_in_a_comment(views_db: Database) -> None:
    """Comments on A's own tables are scrubbed of `db.table` and `table.column` mentions of B's tables,
    but not of the bare name in prose ("the weather table", "look it up in planes"): A's prompt and
    lookup_schema tell A that B's tables exist. (The knowledge base drops an entry for the bare word.)"""
    text = await SchemaCache(views_db, 24_000, ttl_s=600).for_policy(JFK_ONLY).get()
    assert "Departures." in text  # the comment is shown...
    assert not re.search(r"(?<!\w)(weather|planes)(?!\w)", text, re.IGNORECASE), text  # ...without B's tables


_KEEP_UA_ONLY = """
import sys, chdb
c = chdb.connect(sys.argv[1])
c.query("CREATE TABLE nycflights13.flights_a AS nycflights13.flights")
c.query("INSERT INTO nycflights13.flights_a SELECT * FROM nycflights13.flights WHERE carrier = 'UA'")
c.query("DROP TABLE nycflights13.flights SYNC")
c.query("RENAME TABLE nycflights13.flights_a TO nycflights13.flights")
c.query("OPTIMIZE TABLE nycflights13.flights FINAL")
c.close()
"""


@pytest.fixture(scope="module")
async def ua_only_db(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Database]:
    """The demo data as if only United's flights had ever been loaded."""
    data_dir = tmp_path_factory.mktemp("ua-only")
    copy_demo(tmp_path_factory, data_dir / "clickhouse")
    subprocess.run(
        [sys.executable, "-c", _KEEP_UA_ONLY, str(data_dir / "clickhouse")],
        check=True,
        env=engine_environment(),
        capture_output=True,
    )
    database = open_database(make_settings(agent_data_dir=data_dir, anthropic_api_key="test-key"))
    yield database
    await database.close()


async def test_index_hint_does_not_tell_where_bs_rows_sit(db: Database, ua_only_db: Database) -> None:
    """indexHint(cond) makes the engine choose granules by `cond` on the primary key (origin, time_hour)
    without filtering rows by it: the count is of A's rows that share a granule (8,192 rows of ALL
    flights) with a row matching `cond`, so how many of A's rows it counts depends on how B's rows fill
    the granules, like the position functions the check refuses (blockSize(), _part_offset). Under a
    filter off the key (carrier = 'UA') it must answer as on data holding United's rows only."""
    probe = (
        "SELECT count() FROM nycflights13.flights "
        "WHERE indexHint(origin = 'LGA' AND time_hour < toDateTime('2013-02-01 00:00:00', 'America/New_York'))"
    )
    under_a = await db.execute(probe, policy=UA_ONLY)
    a_only = await ua_only_db.execute(probe)
    assert under_a.error is not None or under_a.rows == a_only.rows, (under_a.rows, a_only.rows)


async def test_the_policys_schema_shows_no_value_of_bs_rows_in_a_comment(db: Database) -> None:
    """The sampled values of origin are read under jfk's filter (JFK only), but the table and column
    comments, written about the whole table, are shown as they are: the shipped demo's flights comment
    says "Every flight that departed NYC (EWR, JFK, LGA)", so jfk's model (and, through it, jfk's people)
    learns which origins B's rows have."""
    text = await SchemaCache(db, 24_000, ttl_s=600).for_policy(JFK_ONLY).get()
    assert "Values: JFK" in text  # the samples are filtered...
    assert "LGA" not in text and "EWR" not in text, text[:1500]  # ...the comments are not
