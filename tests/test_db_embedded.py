"""The database layer against the real embedded engine with the demo data."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import sys
import time
from decimal import Decimal

import pytest

from agent.config import Settings
from agent.db import Database, QueryLimits, format_for_model
from agent.db.embedded import EmbeddedDatabase
from agent.db.result import TRUNCATION_NOTE

HEAVY = "SELECT count() FROM numbers(400000000) WHERE sipHash64(number) % 7 = 3"


async def test_n_plus_one_rows_and_has_more(db: Database) -> None:
    result = await db.execute("SELECT * FROM nycflights13.flights")
    assert result.ok and result.row_count == 50 and result.has_more
    assert len(result.columns) == 19
    exact = await db.execute("SELECT * FROM nycflights13.flights LIMIT 50")
    assert exact.row_count == 50 and not exact.has_more
    one_more = await db.execute("SELECT * FROM nycflights13.flights LIMIT 51")
    assert one_more.row_count == 50 and one_more.has_more


async def test_row_cap_is_configurable_per_call(db: Database) -> None:
    result = await db.execute("SELECT number FROM numbers(10)", max_rows=3)
    assert [r[0] for r in result.rows] == [0, 1, 2] and result.has_more


async def test_order_is_preserved_through_the_wrapper(db: Database) -> None:
    result = await db.execute("SELECT dest, count() AS n FROM nycflights13.flights GROUP BY dest ORDER BY n DESC, dest")
    counts = [row[1] for row in result.rows]
    assert counts == sorted(counts, reverse=True)
    assert result.rows[0] == ["ORD", 17283]


async def test_values_decode_faithfully(db: Database) -> None:
    result = await db.execute(
        "SELECT toDecimal64(123.4567, 4) AS d, toDate('2013-01-01') AS day, CAST(NULL AS Nullable(Int32)) AS n, "
        "nan AS f, -inf AS g, [1, 2] AS a, map('k', 1) AS m, 'héllo' AS s, toUInt64(18446744073709551615) AS u, "
        "time_hour AS t FROM nycflights13.flights ORDER BY time_hour LIMIT 1"
    )
    d, day, n, f, g, a, m, s, u, t = result.rows[0]
    assert d == Decimal("123.4567") and day == dt.date(2013, 1, 1) and n is None
    assert f != f and g == float("-inf") and a == [1, 2] and m == {"k": 1} and s == "héllo"
    assert u == 18446744073709551615
    assert t.isoformat() == "2013-01-01T05:00:00-05:00"  # the column's America/New_York zone
    summary = result.summary()
    assert summary["rows"][0][:5] == ["123.4567", "2013-01-01", None, "nan", "-inf"]
    assert summary["rows"][0][8] == "18446744073709551615"  # beyond JSON's exact integers
    table = format_for_model(result, 200, 10_000)
    assert "| 123.4567 | 2013-01-01 | NULL | nan | -inf | [1, 2] | {'k': 1} | héllo |" in table


async def test_long_cells_and_results_are_cut_with_markers(db: Database) -> None:
    result = await db.execute("SELECT repeat('x', 500) AS long, number FROM numbers(60)")
    text = format_for_model(result, max_cell_chars=200, max_result_chars=2_000)
    assert "x" * 200 + "…[+300 chars]" in text
    assert len(text) <= 2_000
    assert "[Output cut to" in text and TRUNCATION_NOTE in text


async def test_empty_result_keeps_its_columns(db: Database) -> None:
    result = await db.execute("SELECT carrier, name FROM nycflights13.airlines WHERE 0")
    assert result.ok and result.columns == ["carrier", "name"] and result.rows == []


async def test_meta_statements_run(db: Database) -> None:
    tables = await db.execute("SHOW TABLES FROM nycflights13")
    assert [r[0] for r in tables.rows] == sorted(["airlines", "airports", "flights", "planes", "weather"])
    described = await db.execute("DESCRIBE nycflights13.airlines")
    assert [r[0] for r in described.rows] == ["carrier", "name"]


async def test_duplicate_column_names_fall_back_to_the_bare_query(db: Database) -> None:
    result = await db.execute("SELECT number, number FROM numbers(3)")
    assert result.ok and result.columns == ["number", "number"]


@pytest.mark.parametrize(
    ("sql", "code", "hint"),
    [
        ("SELECT count( FROM nycflights13.flights", 62, "Syntax error"),
        ("SELECT arr_delayy FROM nycflights13.flights", 47, "Did you mean: arr_delay"),
        ("SELECT * FROM nycflights13.flight", 60, "Did you mean: nycflights13.flights"),
        ("SELECT toDatee('2013-01-01')", 46, "ClickHouse names differ"),
        ("SELECT carrier, count() FROM nycflights13.flights", 215, "GROUP BY"),
        ("SELECT 1 + 'a'", 43, "argument type"),
    ],
)
async def test_errors_come_back_with_hints(db: Database, sql: str, code: int, hint: str) -> None:
    result = await db.execute(sql)
    assert result.error_code == code
    assert result.hint and hint in result.hint
    assert "Stack trace" not in (result.error or "")


async def test_a_runtime_error_does_not_poison_the_next_query(db: Database) -> None:
    for _ in range(3):
        failed = await db.execute("SELECT throwIf(number = 5) FROM numbers(10)")
        assert failed.error_code == 395
        after = await db.execute("SELECT 42 AS answer")
        assert after.columns == ["answer"] and after.rows == [[42]]


async def test_queries_run_in_parallel(db: Database) -> None:
    results = await asyncio.gather(
        *(db.execute(f"SELECT count() FROM nycflights13.flights WHERE month = {m}") for m in range(1, 13))
    )
    assert sum(r.rows[0][0] for r in results) == 336776


async def test_cancelling_the_caller_kills_the_query(db: Database) -> None:
    task = asyncio.create_task(db.execute(HEAVY))
    for _ in range(50):
        await asyncio.sleep(0.05)
        if await db.running_queries():
            break
    assert await db.running_queries(), "the heavy query should be running"
    started = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.perf_counter() - started < 2
    assert await db.running_queries() == []
    assert (await db.execute("SELECT 1")).rows == [[1]]


async def test_limits_are_enforced_by_the_engine(settings: Settings) -> None:
    tight = EmbeddedDatabase(settings.chdb_path, QueryLimits(max_execution_time=1, max_rows_to_read=100_000))
    try:
        too_many = await tight.execute("SELECT sum(distance) FROM nycflights13.flights")
        assert too_many.error_code == 158 and "WHERE" in (too_many.hint or "")
        slow = await tight.execute("SELECT count() FROM numbers(90000) WHERE sleepEachRow(0.0001) = 0")
        assert slow.error_code == 159 or slow.ok is False
        settings_row = await tight.execute("SELECT getSetting('readonly'), getSetting('max_execution_time')")
        assert settings_row.rows == [[1, 1.0]]
    finally:
        await tight.close()


async def test_a_typo_in_the_first_keyword_is_named(db: Database) -> None:
    result = await db.execute("SELEC 1")
    assert result.error and "Did you mean SELECT?" in result.error


def test_a_second_process_is_told_who_holds_the_data(settings: Settings, db: Database) -> None:
    from agent.db.embedded import claim_data_dir

    claim_data_dir(settings.chdb_path)  # this test process holds it
    completed = subprocess.run(
        [sys.executable, "-m", "agent.cli", "sql", "SELECT 1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"AGENT_DATA_DIR": str(settings.agent_data_dir), "PATH": "/usr/bin:/bin"},
    )
    assert completed.returncode == 2
    assert "is in use by process" in completed.stderr and "pytest" in completed.stderr
    assert "Traceback" not in completed.stderr
