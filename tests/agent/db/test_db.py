"""The database layer against the real engine (a confined child process) with the demo data."""

from __future__ import annotations

import asyncio
import csv
import io
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import Settings
from agent.db import Database, EngineError, QueryRefused, Scope, format_for_model, new_query_id, open_database
from agent.db.functions import load_policy
from agent.db.result import TRUNCATION_NOTE
from tests.conftest import HEAVY, make_settings, until_running


async def test_n_plus_one_rows_and_has_more(db: Database) -> None:
    result = await db.execute("SELECT * FROM nycflights13.flights")
    assert result.ok and result.row_count == 50 and result.has_more
    assert len(result.columns) == 19 and len(result.types) == 19
    exact = await db.execute("SELECT * FROM nycflights13.flights LIMIT 50")
    assert exact.row_count == 50 and not exact.has_more
    one_more = await db.execute("SELECT * FROM nycflights13.flights LIMIT 51")
    assert one_more.row_count == 50 and one_more.has_more


async def test_row_cap_is_configurable_per_call(db: Database) -> None:
    result = await db.execute("SELECT number FROM numbers(10)", max_rows=3)
    assert [r[0] for r in result.rows] == ["0", "1", "2"] and result.has_more


async def test_order_is_preserved_through_the_wrapper(db: Database) -> None:
    result = await db.execute("SELECT dest, count() AS n FROM nycflights13.flights GROUP BY dest ORDER BY n DESC, dest")
    counts = [int(row[1]) for row in result.rows]
    assert counts == sorted(counts, reverse=True)
    assert result.rows[0] == ["ORD", "17283"]


async def test_unqualified_names_work_with_one_configured_database(db: Database) -> None:
    result = await db.execute("SELECT count() FROM flights")
    assert result.rows == [["336776"]]


async def test_cells_are_clickhouse_text_and_json_numbers_where_exact(db: Database) -> None:
    result = await db.execute(
        "SELECT toDecimal64(123.4567, 4) AS d, toDate('2013-01-01') AS day, CAST(NULL AS Nullable(Int32)) AS n, "
        "nan AS f, -inf AS g, [1, 2] AS a, map('k', 1) AS m, 'héllo' AS s, toUInt64(18446744073709551615) AS u, "
        "time_hour AS t, toFloat32(0.1) AS f32, 42 AS i FROM nycflights13.flights ORDER BY time_hour LIMIT 1"
    )
    assert result.rows[0] == [
        "123.4567", "2013-01-01", None, "nan", "-inf", "[1,2]", "{'k':1}", "héllo", "18446744073709551615",
        "2013-01-01 05:00:00", "0.1", "42",
    ]  # fmt: skip
    summary = result.summary()
    assert summary["rows"][0] == [
        "123.4567", "2013-01-01", None, "nan", "-inf", "[1,2]", "{'k':1}", "héllo", "18446744073709551615",
        "2013-01-01 05:00:00", 0.1, 42,
    ]  # fmt: skip
    table = format_for_model(result, 10_000)
    assert "| 123.4567 | 2013-01-01 | NULL | nan | -inf | [1,2] | {'k':1} | héllo |" in table


async def test_long_cells_are_cut_by_the_engine_and_results_by_the_formatter(db: Database) -> None:
    result = await db.execute("SELECT repeat('x', 500) AS long, number FROM numbers(60)")
    assert result.rows[0][0] == "x" * 200 + "…[+300 chars]"
    text = format_for_model(result, max_result_chars=2_000)
    assert len(text) <= 2_000
    assert "[Output cut to" in text and TRUNCATION_NOTE in text


async def test_totals_are_shown_not_dropped(db: Database) -> None:
    result = await db.execute(
        "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin WITH TOTALS ORDER BY origin"
    )
    assert result.rows == [["EWR", "120835"], ["JFK", "111279"], ["LGA", "104662"]]
    assert result.totals == ["", "336776"]
    assert "Totals: |  | 336776 |" in format_for_model(result, 10_000)


async def test_empty_result_keeps_its_columns_and_shows_their_types(db: Database) -> None:
    result = await db.execute("SELECT * FROM nycflights13.airlines LIMIT 0")
    assert result.ok and result.columns == ["carrier", "name"] and result.rows == []
    assert "Columns: carrier (String), name (String)" in format_for_model(result, 10_000)


async def test_duplicate_column_names_are_kept(db: Database) -> None:
    result = await db.execute("SELECT number, number FROM numbers(3)")
    assert result.ok and result.columns == ["number", "number"] and result.rows[2] == ["2", "2"]


@pytest.mark.parametrize(
    ("sql", "code", "hint"),
    [
        ("SELECT count( FROM nycflights13.flights", 62, "Syntax error"),
        ("SELECT arr_delayy FROM nycflights13.flights", 47, "Did you mean: arr_delay"),
        ("SELECT * FROM nycflights13.flight", 60, "Did you mean: nycflights13.flights"),
        ("SELECT carrier, count() FROM nycflights13.flights", 215, "GROUP BY"),
        ("SELECT 1 + 'a'", 43, "argument type"),
    ],
)
async def test_errors_come_back_with_hints(db: Database, sql: str, code: int, hint: str) -> None:
    result = await db.execute(sql)
    assert result.error_code == code, result.error
    assert result.hint and hint in result.hint
    assert "Stack trace" not in (result.error or "")
    assert "formatQuery" not in (result.error or "") and "formatRowNoNewline" not in (result.error or "")


async def test_an_unknown_function_is_refused_with_the_nearest_allowed_names(db: Database) -> None:
    result = await db.execute("SELECT toDatee('2013-01-01')")
    assert result.error and "Did you mean: toDate" in result.error and "ClickHouse names differ" in result.error


async def test_a_runtime_error_does_not_poison_the_next_query(db: Database) -> None:
    for _ in range(3):
        failed = await db.execute("SELECT throwIf(number = 5) FROM numbers(10)")
        assert failed.error_code == 395
        after = await db.execute("SELECT 42 AS answer")
        assert after.columns == ["answer"] and after.rows == [["42"]]


async def test_queries_run_in_parallel(db: Database) -> None:
    results = await asyncio.gather(
        *(db.execute(f"SELECT count() FROM nycflights13.flights WHERE month = {m}") for m in range(1, 13))
    )
    assert sum(int(r.rows[0][0]) for r in results) == 336776


async def test_cancelling_the_caller_kills_the_query(db: Database) -> None:
    task = asyncio.create_task(db.execute(HEAVY))
    await until_running(db, task)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await db.running_queries() == [], "killed, not left running (its seconds of work undone)"
    assert (await db.execute("SELECT 1")).rows == [["1"]]


async def test_export_streams_every_row_as_clickhouse_text(db: Database) -> None:
    export = await db.export("SELECT carrier, name FROM nycflights13.airlines ORDER BY carrier", max_rows=100)
    rows = [row async for row in export.rows]
    assert [c.name for c in export.columns] == ["carrier", "name"]
    assert len(rows) == 16 and rows[0] == ["9E", "Endeavor Air Inc."]
    capped = await db.export("SELECT number FROM numbers(100000)", max_rows=1234)
    assert len([row async for row in capped.rows]) == 1234


@pytest.fixture
async def scratch_db(tmp_path: Path) -> Database:
    """An engine of its own on an empty data directory, with tight limits."""
    settings = make_settings(
        agent_data_dir=tmp_path, clickhouse_databases=["scratch*"], max_execution_time=1, max_rows_to_read=100_000
    )
    database = open_database(settings)
    yield database  # type: ignore[misc]
    await database.close()


async def test_limits_are_enforced_by_the_engine(scratch_db: Database) -> None:
    too_many = await scratch_db.execute("SELECT sum(number) FROM numbers(1000000)")
    assert too_many.error_code == 158 and "WHERE" in (too_many.hint or "")
    # Even with the check bypassed, a subquery's SETTINGS cannot loosen a limit: the engine ignores them.
    loosened = "SELECT * FROM (SELECT count() FROM numbers(1000000) SETTINGS max_rows_to_read = 0)"
    with pytest.raises(EngineError, match="Code: 158"):
        await scratch_db.backend.query(loosened, "TSV", new_query_id())
    slow = await scratch_db.execute(
        "SELECT sum(arraySum(arrayMap(x -> cityHash64(x, number), range(5000)))) FROM numbers(90000)"
    )
    assert slow.error_code in (158, 159), slow.error


async def test_the_engine_runs_confined(db: Database) -> None:
    await db.execute("SELECT 1")  # the engine starts on demand: a test before this one may have stopped it
    status = db.backend.sandbox_status
    assert status.startswith("Landlock ABI"), status
    assert "no TCP" in status


async def test_a_crashed_engine_is_an_error_then_restarts(scratch_db: Database) -> None:
    assert (await scratch_db.execute("SELECT 1")).rows == [["1"]]
    child = scratch_db.backend._child  # type: ignore[attr-defined]
    os.kill(child.process.pid, signal.SIGKILL)
    await child.process.wait()
    from agent.db import DatabaseUnavailable

    with pytest.raises(DatabaseUnavailable):
        await child.read_task
        raise DatabaseUnavailable("child gone")
    assert (await scratch_db.execute("SELECT 2")).rows == [["2"]]


def test_a_second_process_is_told_who_holds_the_data(settings: Settings, db: Database) -> None:
    from agent.db.embedded import claim_data_dir

    claim_data_dir(settings.chdb_path)  # this test process holds it
    completed = subprocess.run(
        [sys.executable, "-m", "process.cli", "sql", "SELECT 1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"AGENT_DATA_DIR": str(settings.agent_data_dir), "PATH": "/usr/bin:/bin"},
    )
    assert completed.returncode == 2
    assert "is in use by process" in completed.stderr and "pytest" in completed.stderr
    assert "Traceback" not in completed.stderr


async def test_a_kill_gets_through_while_every_connection_is_busy(db: Database) -> None:
    """More queries than connections and workers (each would run for the 30 s limit): cancelling
    them all still kills them all, at once."""
    fresh = Database(db.backend, scope=db.scope, functions=db.functions)  # no cached check: all 30 parse first
    tasks = [asyncio.create_task(fresh.execute(HEAVY)) for _ in range(30)]
    try:
        await until_running(db)  # some run, the rest wait for a connection (30 checks first: slow when loaded)
    except BaseException:  # leave no 30 s query behind for the tests after this one
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    for task in tasks:
        task.cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes), "none ran its 30 s of work to the end"
    for _ in range(100):  # a killed query can linger in system.processes a moment after it stops
        if not await db.running_queries():
            break
        await asyncio.sleep(0.05)
    assert await db.running_queries() == []


async def test_a_connection_never_returns_to_the_pool_on_another_database(db: Database) -> None:
    """`USE` is allowed under readonly=1; the check refuses it, and the engine heals the pool even so,
    because the check resolves unqualified names against the configured database."""
    for _ in range(8):  # reach every pooled connection
        await db.backend.query("USE system", "TSV", new_query_id())
    results = await asyncio.gather(*(db.execute("SELECT count() FROM flights") for _ in range(8)))
    assert all(r.rows == [["336776"]] for r in results), [r.error for r in results]


async def test_every_engine_thread_is_confined(db: Database) -> None:
    """Landlock binds the thread that applies it and those it creates later: the engine confines
    itself before chdb starts any thread, so worker threads cannot read what the main one cannot."""
    await db.execute("SELECT count() FROM nycflights13.flights GROUP BY origin")  # start pipeline workers
    pid = db.backend._child.process.pid  # type: ignore[attr-defined]
    tasks = list(Path(f"/proc/{pid}/task").iterdir())
    assert len(tasks) > 5
    unconfined = [t.name for t in tasks if "NoNewPrivs:\t1" not in (t / "status").read_text()]
    assert unconfined == []


async def test_a_query_the_engine_cannot_stop_fails_alone_and_the_others_are_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One huge function call ignores max_execution_time and KILL; the app restarts the engine process
    instead of leaving a connection held for minutes. Only that statement fails (as a timeout the model
    can read); a query of someone else's that the restart interrupted (here: waiting for the engine's
    one connection) runs again on the new engine."""
    from agent.db import engine_settings
    from agent.db.embedded import EmbeddedBackend

    settings = make_settings(agent_data_dir=tmp_path, clickhouse_databases=["x*"], max_execution_time=1)
    scope = Scope.of(settings.clickhouse_databases)
    backend = EmbeddedBackend(settings.chdb_path, engine_settings(settings, scope), stuck_grace_s=2, pool_size=1)
    database = Database(backend, scope=scope, functions=load_policy())
    caplog.set_level(logging.INFO, logger="agent.db.embedded")
    try:
        await database.execute("SELECT 1")  # the engine is up
        stuck = asyncio.create_task(
            database.execute("SELECT arrayLevenshteinDistance(range(200000), range(1, 200001)) AS d", owner="a")
        )
        await asyncio.sleep(1.5)
        innocent = asyncio.create_task(database.execute("SELECT count() FROM numbers(10)", owner="b"))
        stuck_result, innocent_result = await asyncio.gather(stuck, innocent)
        # Stopped by the restart (its work takes minutes), which the code 159 below tells from an ending.
        assert stuck_result.error_code == 159 and "could not be stopped" in (stuck_result.error or "")
        assert stuck_result.hint and "Timeout" in stuck_result.hint
        assert innocent_result.rows == [["10"]], innocent_result.error
        assert "retrying a query interrupted by an engine restart" in caplog.text
        assert (await database.execute("SELECT 1")).rows == [["1"]]  # the new engine answers
    finally:
        await database.close()


async def test_a_result_being_read_when_the_engine_restarts_ends_with_a_clear_error(tmp_path: Path) -> None:
    """Another statement's restart cuts a download off: its reader is told so, not a stream id error."""
    from agent.db import EngineRestarted, engine_settings
    from agent.db.embedded import EmbeddedBackend

    settings = make_settings(agent_data_dir=tmp_path, clickhouse_databases=["x*"], max_execution_time=1)
    scope = Scope.of(settings.clickhouse_databases)
    backend = EmbeddedBackend(settings.chdb_path, engine_settings(settings, scope), stuck_grace_s=2, pool_size=2)
    database = Database(backend, scope=scope, functions=load_policy())
    try:
        export = await database.export("SELECT number FROM numbers(100000)", max_rows=100_000)
        rows = export.rows
        assert await anext(rows) == ["0"]
        stuck = await database.execute("SELECT arrayLevenshteinDistance(range(200000), range(1, 200001)) AS d")
        assert stuck.error_code == 159  # the engine was restarted under the reader
        with pytest.raises(EngineRestarted, match="restarted while this result was being read"):
            async for _ in rows:
                pass
        assert (await database.execute("SELECT 1")).rows == [["1"]]
    finally:
        await database.close()


async def test_a_huge_error_is_cut_and_the_engine_stays_up(db: Database) -> None:
    huge = await db.execute("SELECT throwIf(1, repeat(repeat('A', 1000000), 2))")
    assert huge.error and len(huge.error) < 2_100
    large = await db.execute("SELECT throwIf(1, repeat('A', 500000))")
    assert large.error and len(large.error) < 2_100
    assert (await db.execute("SELECT 1")).rows == [["1"]]


async def test_invalid_utf8_is_cut_by_bytes(db: Database) -> None:
    result = await db.execute("SELECT repeat(repeat(unhex('80'), 1000000), 5) AS c FROM numbers(3)")
    assert result.ok and all(len((row[0] or "").encode()) < 4 * 200 * 3 + 40 for row in result.rows)
    assert result.rows[0][0].endswith(" bytes]")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT " + "abs(" * 400 + "1" + ")" * 400, ""),
        ("SELECT CAST(1, concat('Enum8(''', unhex('FF'), ''' = 1)')) AS e", ""),
        ("DESCRIBE TABLE nycflights13.airlines", "Only SELECT queries run here"),
        ("EXISTS TABLE nycflights13.airlines", "Only SELECT queries run here"),
        ("SELECT FILE('/x')", "reads the host's files or disks"),
    ],
)
async def test_odd_statements_get_a_clear_error_never_an_exception(db: Database, sql: str, message: str) -> None:
    result = await db.execute(sql)
    assert (result.ok or result.error) and message in (result.error or "")


async def test_an_export_error_never_names_an_excluded_table(db: Database) -> None:
    scoped = Database(db.backend, scope=Scope.of(["nycflights13"], ["nycflights13.planes"]), functions=db.functions)
    with pytest.raises((EngineError, QueryRefused)) as caught:
        await scoped.export("SELECT * FROM nycflights13.plane", max_rows=10)
    assert "planes" not in str(caught.value)


async def test_csv_cells_and_headers_a_spreadsheet_would_evaluate_are_escaped(db: Database) -> None:
    """A text cell, or a column alias, starting with = + - @ (or a tab or carriage return) gets a leading
    apostrophe; numbers keep their sign."""
    from agent.db import csv_chunks

    sql = (
        'SELECT \'=HYPERLINK("http://x")\' AS `=HYPERLINK("http://evil","click")`, \'+1\' AS `+a`, '
        "'@SUM(A1)' AS `@b`, '-2' AS `-c`, -3 AS n, 'plain' AS p"
    )
    export = await db.export(sql, max_rows=10)
    body = b"".join([chunk async for chunk in csv_chunks(export, max_bytes=10_000)]).decode()
    header, row = list(csv.reader(io.StringIO(body)))
    assert header == ['\'=HYPERLINK("http://evil","click")', "'+a", "'@b", "'-c", "n", "p"]
    assert row == ['\'=HYPERLINK("http://x")', "'+1", "'@SUM(A1)", "'-2", "-3", "plain"]


async def test_rows_and_bytes_read_come_from_the_engines_own_statistics(db: Database) -> None:
    """chdb's statistics for the query: every row of the table scanned, whatever the result's size."""
    result = await db.execute("SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin")
    assert result.rows_read == 336776 and result.bytes_read is not None and result.bytes_read >= 336776
    failed = await db.execute("SELECT nope FROM nycflights13.flights")
    assert failed.rows_read is None
