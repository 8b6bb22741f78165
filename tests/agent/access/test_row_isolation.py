"""The row-isolation proof (issue 29): under policy A, no statement in the adversarial corpus
(row_isolation.yaml) reads, counts or infers one row of policy B's, on the embedded engine and through
the server backend (the HTTP fake serves the same engine behind the server code path; a real server in
Docker is tests/agent/db/test_db_server.py's).

Each statement runs under A on the full demo data, and without any policy on a copy holding only A's
rows and tables: it is refused, or fails there with the same error, or returns exactly what the copy
returns. Each statement the filter defends is also run with the filter removed, to show that then it
would fail: every one of them is a real probe of B's rows."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from agent.access.policy import Policy
from agent.db import Database, QueryResult, open_database
from agent.db.demo import load_demo
from agent.db.embedded import engine_environment
from tests.conftest import make_settings
from tests.fakes.clickhouse_engine import User
from tests.fakes.clickhouse_http import FakeClickHouse

CORPUS = yaml.safe_load((Path(__file__).parent / "row_isolation.yaml").read_text())
COMPARED = [entry for entry in CORPUS if entry["defence"] in ("filter", "engine")]
FILTERED = [entry for entry in CORPUS if entry["defence"] == "filter"]
CHECKED = [entry for entry in CORPUS if entry["defence"] == "check"]
READONLY = 164  # a SETTINGS clause that would change what the connection pinned
A_TABLES = {"nycflights13.flights": "origin = 'JFK'", "nycflights13.airports": None, "nycflights13.airlines": None}
POLICY_A = Policy("a", MappingProxyType(A_TABLES))
A_UNFILTERED = Policy("a-unfiltered", MappingProxyType({**A_TABLES, "nycflights13.flights": None}))
# What the copy keeps: A's rows of flights, A's whole tables; B's tables are gone.
_KEEP_A_ONLY = """
import sys, chdb
c = chdb.connect(sys.argv[1])
c.query("CREATE TABLE nycflights13.flights_a AS nycflights13.flights")
c.query("INSERT INTO nycflights13.flights_a SELECT * FROM nycflights13.flights WHERE origin = 'JFK'")
c.query("DROP TABLE nycflights13.flights SYNC")
c.query("RENAME TABLE nycflights13.flights_a TO nycflights13.flights")
c.query("DROP TABLE nycflights13.planes SYNC")
c.query("DROP TABLE nycflights13.weather SYNC")
c.close()
"""


@pytest.fixture(scope="session")
async def a_only_db(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Database]:
    """The demo data as if B's rows and tables had never been loaded."""
    data_dir = tmp_path_factory.mktemp("a-only")
    load_demo(data_dir / "clickhouse")
    subprocess.run(
        [sys.executable, "-c", _KEEP_A_ONLY, str(data_dir / "clickhouse")],
        check=True,
        env=engine_environment(),
        capture_output=True,
    )
    database = open_database(make_settings(agent_data_dir=data_dir, anthropic_api_key="test-key"))
    yield database
    await database.close()


@pytest.fixture(scope="session")
async def filtering_server_db(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Database]:
    """The server backend, with a user whose profile lets the agent set readonly=1 itself, and so send a
    policy's filters with each query (the shipped read-only profile cannot: see test_row_access.py)."""
    path = tmp_path_factory.mktemp("filtering-server") / "clickhouse"
    load_demo(path)
    grants = ["GRANT SELECT, SHOW TABLES, SHOW COLUMNS ON nycflights13.* TO agent"]
    with FakeClickHouse(path, {"agent": User("password", {}, grants)}).start() as server:
        database = open_database(make_settings(clickhouse_url=server.url("agent", "nycflights13")))
        yield database
        await database.close()


@pytest.fixture(params=["embedded", "server"])
def engine_db(request: pytest.FixtureRequest) -> Database:
    return request.getfixturevalue("db" if request.param == "embedded" else "filtering_server_db")


def outcome(result: QueryResult, *, totals: bool = True) -> tuple[Any, ...]:
    """What a person or the model can learn from a result: its rows, names, types and totals, or which
    error it failed with. (The server backend does not return WITH TOTALS rows at all, filtered or not.)"""
    if result.error is not None:
        return ("error", result.error_code)
    return ("rows", result.columns, result.types, result.rows, result.totals if totals else None, result.has_more)


def refused(result: QueryResult) -> bool:
    """Refused before it read anything: by the statement check (no engine code; an unknown table is
    refused there too), or by the engine for a setting the connection pinned."""
    return result.error is not None and result.error_code in (None, 60, READONLY)


@pytest.mark.parametrize("entry", COMPARED, ids=[entry["tries"] for entry in COMPARED])
async def test_a_statement_sees_only_policy_as_rows(engine_db: Database, a_only_db: Database, entry: Any) -> None:
    actual = await engine_db.execute(entry["sql"], policy=POLICY_A)
    expected = await a_only_db.execute(entry["sql"])
    if refused(actual):
        return
    totals = engine_db is not a_only_db and "Server" not in type(engine_db.backend).__name__
    assert outcome(actual, totals=totals) == outcome(expected, totals=totals), (entry["tries"], actual.error)
    if entry["defence"] == "engine":
        return
    # The same statement with the filter removed reads B's rows: this test would fail without it.
    unfiltered = await engine_db.execute(entry["sql"], policy=A_UNFILTERED)
    assert outcome(unfiltered, totals=totals) != outcome(expected, totals=totals), entry["tries"]


@pytest.mark.parametrize("entry", CHECKED, ids=[entry["tries"] for entry in CHECKED])
async def test_a_statement_that_would_go_past_the_filter_is_refused(engine_db: Database, entry: Any) -> None:
    result = await engine_db.execute(entry["sql"], policy=POLICY_A)
    assert refused(result), (entry["tries"], result.error, result.rows)


def test_the_corpus_is_large_and_says_what_each_statement_tries() -> None:
    assert len(CORPUS) >= 40 and len(FILTERED) >= 30
    assert all(
        entry["tries"] and entry["sql"] and entry["defence"] in ("filter", "check", "engine") for entry in CORPUS
    )
    assert len({entry["sql"] for entry in CORPUS}) == len(CORPUS)
