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
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from agent.access.policy import Policy
from agent.db import Database, EngineError, QueryResult, new_query_id, open_database
from agent.db.access import RowFilters
from agent.db.demo import DATABASE as DEMO_DATABASE
from agent.db.demo import TABLES as DEMO_TABLES
from agent.db.demo import create_table_sql, source_dir
from agent.db.embedded import engine_environment
from agent.db.hints import error_code
from tests.agent.db.test_db_server import IMAGE, NO_DOCKER
from tests.conftest import make_settings
from tests.demo_data import copy_demo
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
    copy_demo(tmp_path_factory, data_dir / "clickhouse")
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
def filtering_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeClickHouse]:
    """A server with a user whose profile lets the agent set readonly=1 itself, and so send a policy's
    filters with each query (the shipped read-only profile cannot: see test_row_access.py)."""
    path = copy_demo(tmp_path_factory, tmp_path_factory.mktemp("filtering-server") / "clickhouse")
    grants = ["GRANT SELECT, SHOW TABLES, SHOW COLUMNS ON nycflights13.* TO agent"]
    with FakeClickHouse(path, {"agent": User("password", {}, grants)}).start() as server:
        yield server


@pytest.fixture(scope="session")
async def filtering_server_db(filtering_server: FakeClickHouse) -> AsyncIterator[Database]:
    database = open_database(make_settings(clickhouse_url=filtering_server.url("agent", "nycflights13")))
    yield database
    await database.close()


@pytest.fixture(scope="session")
async def docker_server_db() -> AsyncIterator[Database]:
    """A real clickhouse-server in Docker with the demo data, loaded over HTTP from the package's CSVs with
    the demo's own DDL, and a user whose profile lets the agent set readonly itself."""
    if NO_DOCKER is not None:
        pytest.skip(f"a real ClickHouse server needs Docker: {NO_DOCKER}")
    import clickhouse_connect
    from testcontainers.clickhouse import ClickHouseContainer

    with ClickHouseContainer(IMAGE, port=8123) as container:
        host, port = container.get_container_host_ip(), int(container.get_exposed_port(8123))
        admin = clickhouse_connect.get_client(
            host=host, port=port, username=container.username, password=container.password
        )
        _load_demo_over_http(admin)
        admin.command("CREATE USER IF NOT EXISTS agent IDENTIFIED BY 'agent-password'")
        admin.command(f"GRANT SELECT, SHOW TABLES, SHOW COLUMNS ON {DEMO_DATABASE}.* TO agent")
        url = f"http://agent:agent-password@{host}:{port}/{DEMO_DATABASE}"
        database = open_database(make_settings(clickhouse_url=url))
        yield database
        await database.close()


def _load_demo_over_http(admin: Any) -> None:
    admin.command(f"CREATE DATABASE IF NOT EXISTS {DEMO_DATABASE}")
    csv_settings = {
        "format_csv_null_representation": "NA",
        "date_time_input_format": "best_effort",
        "input_format_csv_empty_as_default": 0,
    }
    for table in DEMO_TABLES:
        admin.command(create_table_sql(table, table.name))
        source = source_dir() / table.source
        if source.suffix == ".zip":
            with zipfile.ZipFile(source) as archive:
                data = archive.read(archive.namelist()[0])
        else:
            data = source.read_bytes()
        admin.raw_insert(f"{DEMO_DATABASE}.{table.name}", insert_block=data, settings=csv_settings, fmt="CSVWithNames")


ENGINES = {"embedded": "db", "server": "filtering_server_db", "docker server": "docker_server_db"}


@pytest.fixture(params=list(ENGINES))
def engine_db(request: pytest.FixtureRequest) -> Database:
    """The embedded engine; the server backend against the HTTP fake (the same engine behind the server's
    wire); a real server in Docker when there is one."""
    return request.getfixturevalue(ENGINES[request.param])


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


BYPASSES = [entry for entry in CHECKED if entry.get("past_the_check") == "leaks"]


@pytest.mark.parametrize("entry", BYPASSES, ids=[entry["tries"] for entry in BYPASSES])
async def test_without_the_check_the_engine_alone_would_leak(db: Database, a_only_db: Database, entry: Any) -> None:
    """What the check refuses under a policy is no mere caution: straight on the engine, under A's
    filters, these statements answer differently from the copy that holds only A's rows."""
    under_a = await _straight(db, entry["sql"], await db.row_filters(POLICY_A))
    a_only = await _straight(a_only_db, entry["sql"], None)
    assert under_a != a_only, entry["tries"]


async def _straight(db: Database, sql: str, access: RowFilters | None) -> str:
    try:
        return (await db.backend.query(sql, "TSV", new_query_id(), access=access)).decode()
    except EngineError as exc:
        return f"error {error_code(str(exc))}"


async def test_a_filter_with_quotes_percents_and_ampersands_reaches_the_engine_intact(engine_db: Database) -> None:
    """The filter travels in a connection string (embedded) or a URL (server): every character survives."""
    condition = "origin LIKE 'J%' AND dest != 'A&B=C\\'D' AND carrier != '\\\\'"
    policy = Policy("odd", MappingProxyType({"nycflights13.flights": condition}))
    filtered = await engine_db.execute("SELECT count() FROM nycflights13.flights", policy=policy)
    written = await engine_db.execute(f"SELECT count() FROM nycflights13.flights WHERE {condition}")
    assert filtered.error is None and filtered.rows == written.rows == [["111279"]]


async def test_a_read_limit_error_does_not_count_the_hidden_rows(filtering_server: FakeClickHouse) -> None:
    """Past max_rows_to_read the engine says how many rows it read, hidden ones included: under a policy
    the error keeps its code and hint but not its figures."""
    url = filtering_server.url("agent", "nycflights13")
    limited = open_database(make_settings(clickhouse_url=url, max_rows_to_read=1000))
    try:
        under_a = await limited.execute("SELECT count() FROM flights WHERE dep_delay > 0", policy=POLICY_A)
        open_to_all = await limited.execute("SELECT count() FROM flights WHERE dep_delay > 0")
    finally:
        await limited.close()
    assert under_a.error_code == open_to_all.error_code == 158 and under_a.hint
    assert any(ch.isdigit() for ch in open_to_all.error.replace("158", "")), open_to_all.error
    assert not any(ch.isdigit() for ch in under_a.error.replace("158", "")), under_a.error


def test_the_corpus_is_large_and_says_what_each_statement_tries() -> None:
    assert len(CORPUS) >= 40 and len(FILTERED) >= 30
    assert all(
        entry["tries"] and entry["sql"] and entry["defence"] in ("filter", "check", "engine") for entry in CORPUS
    )
    assert len({entry["sql"] for entry in CORPUS}) == len(CORPUS)
