"""The server backend in every test run: against a fake ClickHouse HTTP server over the embedded
engine (tests/fakes/clickhouse_http.py), in a process of its own with demo data of its own. The
guard, the limits, cancellation, the start-up checks and value fidelity are proven on the server
path here too; tests/agent/db/test_db_server.py runs against a real server where Docker exists.

The agent user is the one docker/clickhouse/agent-user.xml ships, so a change there that the agent
would refuse fails here."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import clickhouse_connect
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError
from prometheus_client import CollectorRegistry

from agent.config import Settings
from agent.db import Database, DatabaseUnavailable, EngineError, new_query_id, open_database
from agent.metrics import Metrics
from agent.pipeline.preflight import Preflight
from agent.prompts import prompt_library
from tests.agent.db.test_fidelity import EXPRESSIONS, clickhouse_text
from tests.agent.db.test_hostile_sql import HOSTILE, OUTFILE
from tests.conftest import DEMO_COUNTS, HEAVY, make_settings, until_running
from tests.demo_data import copy_demo
from tests.fakes.clickhouse_http import FakeClickHouse, User, default_users

PASSWORD = "password"
# Streams one block (about 7 MB of text), then fails: the error comes after the body started.
FAILS_MIDWAY = (
    "SELECT number, repeat('x', 100) AS pad, "
    "throwIf(number >= 100000 AND arraySum(arrayMap(x -> cityHash64(x, number), range(300))) > 0) AS boom "
    "FROM numbers(1000000)"
)
# What the server alone refuses (the statement check bypassed): the read-only profile, no SOURCES grants, the sandbox.
SERVER_REFUSES = [
    case for case in HOSTILE if case.values[1] and case.id.startswith(("write:", "settings:", "table-function:"))
]


def _users() -> dict[str, User]:
    users = default_users(PASSWORD)  # the agent user as docker/clickhouse/agent-user.xml ships it, and admin

    def like_agent(name: str, profile: dict[str, Any] | None = None, grants: list[str] | None = None) -> User:
        own = [grant.replace(" TO agent", f" TO {name}") for grant in users["agent"].grants]
        return User(PASSWORD, {**users["agent"].profile, **(profile or {})}, grants or own)

    return {
        **users,
        "tight": like_agent("tight", {"max_execution_time": 1}),
        "plain": User(PASSWORD, {}, ["GRANT SELECT ON nycflights13.* TO plain"]),  # no profile: the agent sets limits
        # not read-only, with a profile that caps lower than the agent's limits and fixes the overflow mode
        "capped": User(
            PASSWORD,
            {"max_result_rows": 5000, "max_execution_time": 10},
            ["GRANT SELECT ON nycflights13.* TO capped"],
            {
                "max_result_rows": {"max": "5000"},
                "max_rows_to_read": {"max": "1000000"},
                "result_overflow_mode": {"readonly": ""},
            },
        ),
        "wide": like_agent("wide", grants=["GRANT SELECT, INSERT ON nycflights13.* TO wide"]),
        "loose": like_agent("loose", {"max_execution_time": 3600}),
        "readonly2": like_agent("readonly2", {"readonly": 2}),
        "described": like_agent(  # may also read the warehouse's Agents Schema (its descriptions)
            "described",
            grants=["GRANT SELECT ON nycflights13.* TO described", "GRANT SELECT ON agents.* TO described"],
        ),
        "columns": like_agent(
            "columns",
            grants=[
                "GRANT SHOW TABLES, SHOW COLUMNS ON nycflights13.* TO columns",
                "GRANT SELECT(carrier, name) ON nycflights13.airlines TO columns",
            ],
        ),
    }


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeClickHouse]:
    path = copy_demo(tmp_path_factory, tmp_path_factory.mktemp("fake-clickhouse") / "clickhouse")
    with FakeClickHouse(path, _users()).start() as server:
        yield server


@pytest.fixture(scope="module")
async def server_db(fake: FakeClickHouse) -> AsyncIterator[Database]:
    database = open_database(make_settings(clickhouse_url=fake.url("agent", "nycflights13")))
    yield database
    await database.close()


def _http(
    fake: FakeClickHouse, sql: str = "", user: str = "admin", method: str = "POST", **params: Any
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One raw request, as any HTTP client would send it."""
    password = fake.config.users[user].password
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    connection = http.client.HTTPConnection(fake.host, fake.port, timeout=30)
    try:
        path = "/?" + urlencode(params) if params else "/"
        connection.request(method, path, body=sql.encode() if sql else None, headers={"Authorization": f"Basic {auth}"})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def _running(fake: FakeClickHouse, prefix: str = "agent-") -> list[str]:
    _, _, body = _http(fake, f"SELECT query_id FROM system.processes WHERE startsWith(query_id, '{prefix}')")
    return body.decode().split()


def _wait_until(condition: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


# --- results ---


async def test_n_plus_one_rows_and_has_more(server_db: Database) -> None:
    result = await server_db.execute("SELECT * FROM nycflights13.flights")
    assert result.ok and result.row_count == 50 and result.has_more and len(result.columns) == 19
    exact = await server_db.execute("SELECT * FROM nycflights13.flights LIMIT 50")
    assert exact.row_count == 50 and not exact.has_more
    one_more = await server_db.execute("SELECT * FROM nycflights13.flights LIMIT 51")
    assert one_more.row_count == 50 and one_more.has_more
    assert (await server_db.execute("SELECT count() FROM flights")).rows == [["336776"]]


async def test_errors_come_back_with_codes_and_hints(server_db: Database) -> None:
    result = await server_db.execute("SELECT arr_delayy FROM nycflights13.flights")
    assert result.error_code == 47 and result.hint and "Did you mean: arr_delay" in result.hint
    assert (await server_db.execute("1 + 1")).error_code == 62  # a server has implicit_select=0


@pytest.mark.parametrize("expression", EXPRESSIONS)
async def test_a_value_is_shown_as_the_server_prints_it(server_db: Database, expression: str) -> None:
    result = await server_db.execute(f"SELECT {expression} AS v")
    assert result.ok, result.error
    assert result.rows == [[await clickhouse_text(server_db, expression)]]


async def test_export_streams_every_row(server_db: Database) -> None:
    export = await server_db.export("SELECT carrier, name FROM nycflights13.airlines ORDER BY carrier", max_rows=100)
    rows = [row async for row in export.rows]
    assert len(rows) == 16 and rows[0] == ["9E", "Endeavor Air Inc."]
    capped = await server_db.export("SELECT number FROM numbers(100000)", max_rows=1234)
    assert len([row async for row in capped.rows]) == 1234


async def test_an_error_after_the_export_started_is_an_engine_error(server_db: Database) -> None:
    """The server reports it inside the body and breaks the transfer off; the rows before it stay
    rows, and the error is ClickHouse's own."""
    export = await server_db.export(FAILS_MIDWAY, max_rows=1_000_000)
    rows = []
    with pytest.raises(EngineError, match=r"^Code: 395\. DB::Exception: Value passed to 'throwIf'"):
        async for row in export.rows:
            rows.append(row)
    assert 0 < len(rows) < 100_000 and rows[-1][0] == str(len(rows) - 1) and rows[-1][1] == "x" * 100
    assert (await server_db.execute("SELECT 1")).rows == [["1"]]


# --- the guard ---


@pytest.mark.parametrize(("sql", "engine_stops"), HOSTILE)
async def test_hostile_statement_is_refused(server_db: Database, sql: str, engine_stops: bool) -> None:
    OUTFILE.unlink(missing_ok=True)
    result = await server_db.execute(sql)
    assert not result.ok, f"ran: {sql!r} -> {result.rows}"
    assert result.error and len(result.error) < 600
    assert not OUTFILE.exists()
    assert "root:" not in result.error and "ANTHROPIC" not in result.error


@pytest.mark.parametrize(("sql", "engine_stops"), SERVER_REFUSES)
async def test_the_server_alone_refuses_it(server_db: Database, sql: str, engine_stops: bool) -> None:
    """Bypass the statement check: the read-only profile (and missing SOURCES grants) still refuse."""
    with pytest.raises(EngineError):
        await server_db.backend.query(sql, "TSV", new_query_id())


async def test_data_is_unchanged_after_the_corpus(server_db: Database, fake: FakeClickHouse) -> None:
    rows = await server_db.catalog_rows(
        "SELECT name, total_rows FROM system.tables WHERE database = 'nycflights13' ORDER BY name"
    )
    assert {row["name"]: int(row["total_rows"]) for row in rows} == DEMO_COUNTS
    assert _http(fake, "EXISTS DATABASE evil")[2] == b"0\n"


# --- limits and cancellation ---


@pytest.mark.parametrize("user", ["tight", "plain"])  # limits in the user's profile, or sent by the agent
async def test_limits_are_enforced_by_the_server(fake: FakeClickHouse, user: str) -> None:
    database = open_database(make_settings(clickhouse_url=fake.url(user, "nycflights13"), max_execution_time=1))
    try:
        too_many = await database.execute("SELECT count() FROM numbers(1000000000)")
        assert too_many.error_code == 158, too_many.error
        slow = await database.execute(HEAVY)
        assert slow.error_code == 159, slow.error
        with pytest.raises(EngineError, match="Code: 158"):  # a subquery's SETTINGS cannot loosen them
            await database.backend.query(
                "SELECT * FROM (SELECT count() FROM numbers(1000000000) SETTINGS max_rows_to_read = 0)",
                "TSV",
                new_query_id(),
            )
    finally:
        await database.close()


async def test_the_agents_limits_stay_within_the_profiles_constraints(fake: FakeClickHouse) -> None:
    """The agent's own limits (100,000 result rows, 500M rows to read, 30 s) are above what this profile
    allows: sent as they are, every query would fail with SETTING_CONSTRAINT_VIOLATION."""
    status, _, body = _http(fake, "SELECT 1", "capped", max_result_rows=100_000)
    assert status != 200 and b"SETTING_CONSTRAINT_VIOLATION" in body  # the fake refuses as a server does
    database = open_database(make_settings(clickhouse_url=fake.url("capped", "nycflights13")))
    try:
        result = await database.execute("SELECT count() FROM airlines")
        assert result.ok and result.rows == [["16"]], result.error
        names = ("max_result_rows", "max_rows_to_read", "max_execution_time", "max_bytes_to_read")
        names += ("result_overflow_mode", "readonly")
        [row] = await database.catalog_rows(
            "SELECT " + ", ".join(f"toString(getSetting('{name}')) AS {name}" for name in names)
        )
        values = {name: str(row[name]) for name in names}
        assert values["max_result_rows"] == "5000"  # the profile's own value and its constraint
        assert values["max_rows_to_read"] == "1000000"  # the constraint's max, below the agent's 500M
        assert values["max_execution_time"] == "10"  # the profile's value, below the agent's 30
        assert values["max_bytes_to_read"] == "20000000000"  # the agent's own: the profile says nothing
        assert values["result_overflow_mode"] == "throw" and values["readonly"] == "1"  # fixed: not sent
    finally:
        await database.close()


async def test_the_preflight_stops_what_the_profiles_lower_limit_would_kill(fake: FakeClickHouse) -> None:
    """The profile caps max_rows_to_read at 1,000,000, far below the agent's MAX_ESTIMATED_ROWS (500M): the
    preflight stops a read estimated past the profile's cap, and lets one under it run."""
    database = open_database(make_settings(clickhouse_url=fake.url("capped", "nycflights13")))
    preflight = Preflight(database, prompt_library(Settings.model_fields["agent_prompts_dir"].default), 500_000_000)
    metrics = Metrics(CollectorRegistry())
    joined = "FROM flights AS a JOIN flights AS b ON b.tailnum = a.tailnum"
    try:
        assert await preflight.threshold() == 1_000_000
        three = f"SELECT count() {joined} JOIN flights AS c ON c.tailnum = a.tailnum"  # 3 x 336,776 rows
        stopped = await preflight.stopped(three, "q1", "run", metrics)
        assert stopped is not None and "about 1,010,328 rows; a query here may read at most 1,000,000" in (
            stopped.error or ""
        )
        assert await preflight.stopped(f"SELECT count() {joined}", "q2", "run", metrics) is None  # 673,552 rows
    finally:
        await database.close()


async def test_cancelling_the_caller_kills_the_query(server_db: Database, fake: FakeClickHouse) -> None:
    tag = new_query_id()
    task = asyncio.create_task(server_db.execute(HEAVY, query_id=tag))
    assert await until_running(server_db, task) == [tag], "system.processes shows the HTTP query_id"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await server_db.running_queries() == [], "killed, not left running (its seconds of work undone)"
    assert _running(fake) == []
    assert (await server_db.execute("SELECT 1")).rows == [["1"]]


def test_kill_query_stops_a_query_by_its_http_query_id(fake: FakeClickHouse) -> None:
    answers: list[tuple[int, http.client.HTTPMessage, bytes]] = []
    worker = threading.Thread(target=lambda: answers.append(_http(fake, HEAVY, "plain", query_id="kill-me")))
    worker.start()
    assert _wait_until(lambda: _running(fake, "kill-me") == ["kill-me"])
    status, headers, body = _http(fake, "KILL QUERY WHERE query_id = 'kill-me' SYNC", "agent")
    assert status == 403 and headers["X-ClickHouse-Exception-Code"] == "497"  # another user's query
    assert b"User agent attempts to kill query created by plain" in body
    status, _, body = _http(fake, "KILL QUERY WHERE query_id = 'kill-me' SYNC", "plain")
    assert status == 200 and body == f"finished\tkill-me\tplain\t{HEAVY}\n".encode()
    worker.join(10)
    (status, headers, body), *_ = answers
    assert status == 500 and headers["X-ClickHouse-Exception-Code"] == "394"
    assert body.startswith(b"Code: 394. DB::Exception: Query was cancelled. (QUERY_WAS_CANCELLED) (version ")
    assert _running(fake, "kill-me") == []


@pytest.mark.parametrize(("cancel", "killed"), [("1", True), ("0", False)])
def test_a_client_hanging_up_cancels_a_read_only_query(fake: FakeClickHouse, cancel: str, killed: bool) -> None:
    """cancel_http_readonly_queries_on_client_close=1 with readonly > 0: the query stops with its client."""
    query_id = f"hang-up-{cancel}"
    params = urlencode({"query_id": query_id, "readonly": 1, "cancel_http_readonly_queries_on_client_close": cancel})
    auth = base64.b64encode(f"plain:{PASSWORD}".encode()).decode()
    with socket.create_connection((fake.host, fake.port)) as client:
        client.sendall(
            f"POST /?{params} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n"
            f"Content-Length: {len(HEAVY)}\r\n\r\n{HEAVY}".encode()
        )
        assert _wait_until(lambda: _running(fake, query_id) == [query_id])
    assert _wait_until(lambda: _running(fake, query_id) == [], timeout_s=1) is killed
    _http(fake, f"KILL QUERY WHERE query_id = '{query_id}' SYNC")
    assert _running(fake, query_id) == []


# --- the start-up checks ---


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ("wide", "more access than the agent may use: GRANT SELECT, INSERT ON nycflights13.* TO wide"),
        ("admin", "more access than the agent may use: GRANT ALL ON"),
        ("loose", "missing or looser on: max_execution_time"),
        ("readonly2", "profile has readonly=2"),
    ],
)
async def test_a_user_with_more_than_the_agent_may_use_is_refused(
    fake: FakeClickHouse, user: str, message: str
) -> None:
    database = open_database(make_settings(clickhouse_url=fake.url(user, "nycflights13")))
    try:
        with pytest.raises(DatabaseUnavailable, match=message):
            await database.execute("SELECT 1")
    finally:
        await database.close()


async def test_select_on_the_agents_schema_is_least_privilege(fake: FakeClickHouse) -> None:
    database = open_database(make_settings(clickhouse_url=fake.url("described", "nycflights13")))
    try:
        assert (await database.execute("SELECT count() FROM airlines")).rows == [["16"]]
        refused = await database.execute("SELECT * FROM agents.dbt_model")
        assert refused.error is not None and "not available" in refused.error  # still out of the model's scope
    finally:
        await database.close()


async def test_select_on_some_columns_is_least_privilege(fake: FakeClickHouse) -> None:
    database = open_database(make_settings(clickhouse_url=fake.url("columns", "nycflights13")))
    try:
        assert (await database.execute("SELECT count() FROM airlines")).rows == [["16"]]
    finally:
        await database.close()


async def test_a_server_without_parse_query_to_json_is_refused(tmp_path: Path) -> None:
    users = {"agent": User(PASSWORD, {"readonly": 1}, ["GRANT SELECT ON default.* TO agent"])}
    with FakeClickHouse(
        tmp_path / "old", users, hidden_functions=["parseQueryToJSON"], version="25.3.1.1"
    ).start() as old:
        database = open_database(
            make_settings(clickhouse_url=old.url("agent", "default"), clickhouse_databases=["default"])
        )
        try:
            with pytest.raises(DatabaseUnavailable, match=r"ClickHouse 25\.3\.1\.1 is too old"):
                await database.execute("SELECT 1")
        finally:
            await database.close()


# --- the protocol, as clients see it ---


async def test_clickhouse_connect_sees_the_servers_exception_codes(fake: FakeClickHouse) -> None:
    client = await clickhouse_connect.get_async_client(
        host=fake.host, port=fake.port, username="agent", password=PASSWORD, database="nycflights13"
    )
    try:
        assert (await client.query("SHOW GRANTS")).result_rows == [
            ("GRANT SELECT, SHOW TABLES, SHOW COLUMNS ON nycflights13.* TO agent",)
        ]
        for sql, code, name in [
            ("SELECT * FROM nope", 60, "UNKNOWN_TABLE"),
            ("SELECT count( FROM flights", 62, "SYNTAX_ERROR"),
            ("INSERT INTO airlines VALUES ('ZZ', 'x')", 164, "READONLY"),
            ("SELECT 1 INTO OUTFILE '/tmp/x'", 358, "INTO_OUTFILE_NOT_ALLOWED"),
        ]:
            with pytest.raises(DatabaseError) as raised:
                await client.query(sql)
            assert (raised.value.code, raised.value.name) == (code, name), sql
    finally:
        await client.close()
    with pytest.raises(DatabaseError) as refused:
        await clickhouse_connect.get_async_client(host=fake.host, port=fake.port, username="agent", password="wrong")
    assert (refused.value.code, refused.value.name) == (516, "AUTHENTICATION_FAILED")


def test_the_http_interface_answers_as_clickhouse_does(fake: FakeClickHouse) -> None:
    connection = http.client.HTTPConnection(fake.host, fake.port, timeout=10)
    connection.request("GET", "/ping")
    assert connection.getresponse().read() == b"Ok.\n"
    connection.request("GET", "/nope")
    missing = connection.getresponse()
    assert missing.status == 404 and missing.read().startswith(b"There is no handle /nope")
    connection.close()

    status, headers, body = _http(fake, "SELECT 1 AS one", "agent", query_id="q-1", default_format="JSONCompact")
    assert status == 200 and json.loads(body)["data"] == [[1]]
    assert (headers["X-ClickHouse-Query-Id"], headers["X-ClickHouse-Format"]) == ("q-1", "JSONCompact")
    assert headers["X-ClickHouse-Exception-Tag"] and json.loads(headers["X-ClickHouse-Summary"])["read_rows"] == "1"

    status, headers, body = _http(fake, "SELECT 1", "agent", max_execution_time=100)
    assert (status, headers["X-ClickHouse-Exception-Code"]) == (500, "164")
    assert body.startswith(
        b"Code: 164. DB::Exception: Cannot modify 'max_execution_time' setting in readonly mode. (READONLY) (version "
    )
    assert _http(fake, "SELECT 1", "agent", max_execution_time=30)[0] == 200  # the profile's value: no change
    status, headers, _ = _http(fake, "SELECT 1", "plain", no_such_setting=1)
    assert (status, headers["X-ClickHouse-Exception-Code"]) == (404, "115")
    status, headers, _ = _http(fake, method="GET", user="plain", query="SELECT 1", readonly=1)
    assert (status, headers["X-ClickHouse-Exception-Code"]) == (500, "164")  # a GET is readonly=2
    status, headers, _ = _http(fake, HEAVY, "plain", max_execution_time=1)
    assert (status, headers["X-ClickHouse-Exception-Code"]) == (408, "159")
    # Progress headers went out before the error: the status stays 200 and the code joins the headers.
    late_failure = (
        "SELECT count() FROM numbers(20000000) WHERE throwIf(number = 19999999) = 0 AND sipHash64(number) > 0"
    )
    progress = {"send_progress_in_http_headers": 1, "http_headers_progress_interval_ms": 100, "wait_end_of_query": 1}
    status, headers, body = _http(fake, late_failure, "plain", **progress)
    assert (status, headers["X-ClickHouse-Exception-Code"]) == (200, "395") and headers.get_all("X-ClickHouse-Progress")
    assert body.startswith(b"Code: 395. DB::Exception: Value passed to 'throwIf' function is non-zero")


async def test_rows_and_bytes_read_come_from_the_servers_summary(server_db: Database) -> None:
    """X-ClickHouse-Summary, sent once the query ended (wait_end_of_query): the whole query's reading."""
    result = await server_db.execute("SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin")
    assert result.rows_read == 336776 and result.bytes_read is not None and result.bytes_read >= 336776
