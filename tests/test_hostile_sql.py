"""Hostile statements: every one is refused, the data is unchanged, and the engine stands on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.db import Database, DatabaseError, QueryRefused, check_statement
from agent.db.database import new_query_id
from tests.conftest import DEMO_COUNTS

OUTFILE = Path("/tmp/agent-hostile-outfile.csv")

HOSTILE = [
    # writes and DDL
    "INSERT INTO nycflights13.airlines VALUES ('ZZ', 'Evil Air')",
    "INSERT INTO nycflights13.airlines SELECT * FROM nycflights13.airlines",
    "ALTER TABLE nycflights13.airlines DELETE WHERE 1",
    "ALTER TABLE nycflights13.flights UPDATE dep_delay = 0 WHERE 1",
    "DELETE FROM nycflights13.airlines WHERE 1",
    "UPDATE nycflights13.airlines SET name = 'x' WHERE 1",
    "DROP TABLE nycflights13.flights",
    "DROP DATABASE nycflights13",
    "TRUNCATE TABLE nycflights13.weather",
    "CREATE TABLE nycflights13.evil (a Int8) ENGINE = Memory",
    "CREATE DATABASE evil",
    "CREATE VIEW nycflights13.v AS SELECT 1",
    "RENAME TABLE nycflights13.planes TO nycflights13.planes2",
    "EXCHANGE TABLES nycflights13.planes AND nycflights13.airlines",
    "DETACH TABLE nycflights13.planes",
    "ATTACH TABLE nycflights13.planes",
    "OPTIMIZE TABLE nycflights13.flights FINAL",
    "GRANT ALL ON *.* TO default",
    "CREATE USER evil IDENTIFIED BY 'x'",
    "BACKUP TABLE nycflights13.flights TO Disk('default', 'b.zip')",
    "UNDROP TABLE nycflights13.flights",
    # settings and administration
    "SET readonly = 0",
    "SET max_execution_time = 100000",
    "SELECT 1 SETTINGS readonly = 0",
    "SELECT count() FROM nycflights13.flights SETTINGS max_rows_to_read = 0",
    "SYSTEM SHUTDOWN",
    "SYSTEM DROP DNS CACHE",
    "KILL QUERY WHERE 1",
    "KILL MUTATION WHERE 1",
    "USE system",
    # multi-statement
    "SELECT 1; DROP TABLE nycflights13.flights",
    "SELECT 1; SELECT 2",
    "SELECT 1;\nINSERT INTO nycflights13.airlines VALUES ('ZZ', 'x')",
    # files, network, processes, other databases
    "SELECT * FROM file('/etc/passwd', 'LineAsString')",
    "SELECT file('/etc/passwd')",
    "SELECT * FROM FILE('/etc/hostname', 'LineAsString')",
    "SELECT * FROM url('http://127.0.0.1:1/x', 'CSV', 'a String')",
    "SELECT * FROM s3('http://127.0.0.1:1/bucket/x.csv', 'CSV', 'a String')",
    "SELECT * FROM s3Cluster('default', 'http://127.0.0.1:1/b/x.csv')",
    "SELECT * FROM remote('127.0.0.1:9000', system.one)",
    "SELECT * FROM remoteSecure('127.0.0.1:9440', system.one)",
    "SELECT * FROM cluster('default', system.one)",
    "SELECT * FROM mysql('127.0.0.1:3306', 'db', 't', 'u', 'p')",
    "SELECT * FROM postgresql('127.0.0.1:5432', 'db', 't', 'u', 'p')",
    "SELECT * FROM executable('cat /etc/passwd', 'TSV', 'a String')",
    "SELECT * FROM hdfs('hdfs://127.0.0.1:9000/x', 'TSV', 'a String')",
    "SELECT * FROM input('a String')",
    "SELECT * FROM sqlite('/etc/passwd', 't')",
    "SELECT * FROM `file`('/etc/passwd', 'LineAsString')",
    "WITH x AS (SELECT * FROM file('/etc/passwd', 'LineAsString')) SELECT * FROM x",
    "SELECT * FROM nycflights13.airlines WHERE carrier IN "
    "(SELECT * FROM url('http://127.0.0.1:1/', 'CSV', 'c String'))",
    "EXPLAIN SELECT * FROM file('/etc/passwd', 'LineAsString')",
    # output redirection and formats
    f"SELECT * FROM nycflights13.airlines INTO OUTFILE '{OUTFILE}'",
    f"SELECT * FROM nycflights13.airlines INTO OUTFILE '{OUTFILE}' FORMAT CSV",
    "SELECT * FROM nycflights13.airlines FORMAT Native",
    # malformed
    "",
    "   ;  ",
    "SELECT 'unterminated",
]


async def _counts(db: Database) -> dict[str, int]:
    result = await db.execute(
        "SELECT name, total_rows FROM system.tables WHERE database = 'nycflights13' ORDER BY name"
    )
    return {name: rows for name, rows in result.rows}


def test_corpus_is_large_enough() -> None:
    assert len(HOSTILE) >= 40


@pytest.mark.parametrize("sql", HOSTILE)
async def test_hostile_statement_is_refused_with_a_clear_error(db: Database, sql: str) -> None:
    OUTFILE.unlink(missing_ok=True)
    result = await db.execute(sql)
    assert not result.ok
    assert result.error and len(result.error) < 400
    assert not OUTFILE.exists()


async def test_data_is_unchanged_after_the_whole_corpus(db: Database) -> None:
    before = await _counts(db)
    assert before == DEMO_COUNTS
    for sql in HOSTILE:
        await db.execute(sql)
    assert await _counts(db) == DEMO_COUNTS
    databases = await db.execute("SELECT name FROM system.databases WHERE name = 'evil'")
    assert databases.rows == []


ENGINE_REFUSES = [
    "INSERT INTO nycflights13.airlines VALUES ('ZZ', 'x')",
    "DROP TABLE nycflights13.flights",
    "SET readonly = 0",
    "SELECT 1 SETTINGS max_threads = 1",
    "SELECT * FROM file('/etc/passwd', 'LineAsString')",
    "SELECT * FROM url('http://127.0.0.1:1/x', 'CSV', 'a String')",
    "SELECT * FROM remote('127.0.0.1:9000', system.one)",
    "SELECT * FROM executable('cat /etc/passwd', 'TSV', 'a String')",
    "SELECT * FROM s3('http://127.0.0.1:1/bucket/x.csv', 'CSV', 'a String')",
]


@pytest.mark.parametrize("sql", ENGINE_REFUSES)
async def test_the_engine_refuses_without_the_parser_check(db: Database, sql: str) -> None:
    """Bypass the token check: the read-only connection alone must refuse (code 164, READONLY)."""
    with pytest.raises(DatabaseError, match=r"Code: 164"):
        async for _ in db._stream(sql, new_query_id()):
            pass


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 'file(' AS text, 'DROP TABLE x' AS other",
        "SELECT format('{} flights', count()) FROM nycflights13.flights",
        "SELECT 1 -- ; DROP TABLE nycflights13.flights",
        "/* INTO OUTFILE */ SELECT 1",
        "SELECT count() AS `settings` FROM nycflights13.airlines",
    ],
)
def test_harmless_lookalikes_pass_the_check(sql: str) -> None:
    if "`settings`" in sql:
        with pytest.raises(QueryRefused):  # conservative: the word SETTINGS anywhere is refused
            check_statement(sql)
        return
    check_statement(sql)
