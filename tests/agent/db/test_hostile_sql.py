"""Hostile statements: each is refused through the full path, nothing is written or leaked, and for
each class the test records which line stops it when the statement check is bypassed (the table in
docs/SECURITY.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.db import Database, EngineError, Scope, new_query_id
from tests.conftest import DEMO_COUNTS

OUTFILE = Path("/tmp/agent-hostile-outfile.csv")
ZW = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u180e"]  # ClickHouse's lexer reads these as spaces


def _case(group: str, sql: str, engine_stops: bool) -> pytest.ParameterSet:
    return pytest.param(sql, engine_stops, id=f"{group}:{sql[:60]}")


# (class, statement, does the engine alone refuse it? i.e. read-only connection + Landlock sandbox)
HOSTILE = [
    # writes and DDL: read-only at the engine
    *(
        _case("write", sql, True)
        for sql in [
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
            "OPTIMIZE TABLE nycflights13.flights FINAL",
            "GRANT ALL ON *.* TO default",
            "CREATE USER evil IDENTIFIED BY 'x'",
            "BACKUP TABLE nycflights13.flights TO Disk('default', 'b.zip')",
            "CREATE TEMPORARY TABLE t (a Int8)",
        ]
    ),
    # settings: read-only at the engine
    *(
        _case("settings", sql, True)
        for sql in [
            "SET readonly = 0",
            "SET max_execution_time = 100000",
            "SELECT 1 SETTINGS readonly = 0",
            "SELECT count() FROM nycflights13.flights SETTINGS max_rows_to_read = 0",
        ]
    ),
    # the engine ignores a subquery's SETTINGS (the limits hold: tests/agent/db/test_db.py), the check refuses it
    _case("settings", "SELECT * FROM (SELECT 1 SETTINGS max_threads = 1)", False),
    # administration that a read-only connection still allows: only the check stops these
    *(_case("admin", sql, False) for sql in ["KILL QUERY WHERE 1", "KILL QUERY WHERE query LIKE '%agent-%' ASYNC"]),
    *(_case("admin", sql, True) for sql in ["SYSTEM SHUTDOWN", "SYSTEM DROP DNS CACHE"]),
    _case("admin", "KILL MUTATION WHERE 1", False),
    _case("admin", "USE system", False),
    # multiple statements
    *(
        _case("multi", sql, True)
        for sql in [
            "SELECT 1; DROP TABLE nycflights13.flights",
            "SELECT 1;\nINSERT INTO nycflights13.airlines VALUES ('ZZ', 'x')",
            "SELECT 1 -- ;\n; DROP TABLE nycflights13.flights",
        ]
    ),
    # the scalar file() function: Landlock stops the read when the check is bypassed
    *(
        _case("file", sql, True)
        for sql in [
            "SELECT file('/etc/passwd')",
            "SELECT file('/proc/self/environ')",
            "SELECT length(file('/proc/1/environ'))",
            "SELECT FILE('/etc/hostname')",
            "SELECT `file`('/etc/hostname')",
            "SELECT substring(file('/etc/passwd'), 1, 4) AS x FROM nycflights13.airlines LIMIT 1",
            "WITH f AS (SELECT file('/etc/passwd') AS x) SELECT * FROM f",
            "SELECT arrayMap(p -> file(p), ['/etc/passwd'])",
            "SELECT * APPLY(file) FROM (SELECT '/etc/passwd' AS p)",
            "SELECT carrier FROM nycflights13.airlines ORDER BY file('/etc/passwd') LIMIT 1",
            "SELECT count() FROM nycflights13.airlines WHERE startsWith(file('/etc/passwd'), 'root')",
            "EXPLAIN actions = 1 SELECT file('/etc/hostname')",
            "SHOW COLUMNS FROM nycflights13.airlines WHERE startsWith(file('/etc/passwd'), 'root')",
            *(f"SELECT file{ch}('/proc/self/environ')" for ch in ZW),
            "SELECT $a b$, file('/etc/passwd') FROM (SELECT 1 AS `$a`) -- $a b$",
            "SELECT $$x$$ AS a, file('/etc/passwd')",
            # evaluated on the engine's pipeline threads, not the thread that opened the connection
            "SELECT file(if(number < 10, '/etc/passwd', 'x')) FROM numbers(20)",
        ]
    ),
    # output redirection: the sandbox refuses the write
    *(
        _case("outfile", sql, True)
        for sql in [
            f"SELECT * FROM nycflights13.airlines INTO OUTFILE '{OUTFILE}'",
            f"SELECT * FROM nycflights13.airlines INTO OUTFILE '{OUTFILE}' TRUNCATE FORMAT CSV",
            f"SELECT 'x' INTO OUTFILE '{OUTFILE}' APPEND",
            f"SELECT 'x' INTO OUTFILE '{OUTFILE}.gz' COMPRESSION 'gzip'",
            f"SELECT 'x' INTO OUTFILE '{OUTFILE}' AND STDOUT",
            f"EXPLAIN SYNTAX SELECT 1 AS `echo pwned` INTO OUTFILE '{OUTFILE}'",
            f"SHOW TABLES FROM nycflights13 INTO OUTFILE '{OUTFILE}'",
            f"DESCRIBE TABLE nycflights13.airlines INTO OUTFILE '{OUTFILE}'",
            f"EXISTS TABLE nycflights13.airlines INTO OUTFILE '{OUTFILE}'",
        ]
    ),
    # EXPLAIN SYNTAX prints file() without calling it: harmless, and refused by the check as not a SELECT
    _case("file", "EXPLAIN SYNTAX SELECT file('/etc/hostname')", False),
    _case("format", "SELECT * FROM nycflights13.airlines FORMAT Native", False),
    # table functions that reach files, the network, processes or other databases
    *(
        _case("table-function", sql, True)
        for sql in [
            "SELECT * FROM file('/etc/passwd', 'LineAsString')",
            "SELECT * FROM url('http://127.0.0.1:1/x', 'CSV', 'a String')",
            "SELECT * FROM s3('http://127.0.0.1:1/bucket/x.csv', 'CSV', 'a String')",
            "SELECT * FROM remote('127.0.0.1:9000', system.one)",
            "SELECT * FROM remoteSecure('127.0.0.1:9440', system.one)",
            "SELECT * FROM mysql('127.0.0.1:3306', 'db', 't', 'u', 'p')",
            "SELECT * FROM postgresql('127.0.0.1:5432', 'db', 't', 'u', 'p')",
            "SELECT * FROM executable('cat /etc/passwd', 'TSV', 'a String')",
            "SELECT * FROM sqlite('/etc/passwd', 't')",
            "SELECT * FROM `file`('/etc/passwd', 'LineAsString')",
            "SELECT * FROM view(SELECT file('/etc/passwd'))",
            "SELECT * FROM nycflights13.airlines WHERE carrier IN "
            "(SELECT * FROM url('http://127.0.0.1:1/', 'CSV', 'c String'))",
        ]
    ),
    # a column structure string is parsed by ClickHouse, and its ALIAS expressions run unseen by any check
    _case("table-function", "SELECT b FROM values('a UInt8, b String ALIAS hostName()', 1)", False),
    _case(
        "table-function",
        "SELECT s FROM generateRandom('a UInt8, s String ALIAS getSetting(''readonly'')') LIMIT 1",
        False,
    ),
    _case(
        "table-function", "SELECT s FROM generateRandom('a UInt8, s String ALIAS file(''/etc/passwd'')') LIMIT 1", True
    ),
    _case("table-function", "SELECT * FROM format(CSV, 'a String ALIAS hostName()', '1')", False),
    _case("scope", "SELECT inIgnoreSet('x', system.processes)", True),
    _case("scope", "SELECT notInIgnoreSet('x', nycflights13.airlines)", False),
    _case("table-function", "SELECT * FROM merge('system', '^users$')", True),
    _case("table-function", "SELECT * FROM loop(nycflights13.airlines) LIMIT 1", True),
    _case("table-function", "SELECT * FROM merge('nycflights13', '^air')", False),
    # the host, the server and other sessions: only the check stops these in the embedded engine
    *(
        _case("host", sql, False)
        for sql in [
            "SELECT hostName()",
            "SELECT FQDN()",
            "SELECT version(), uptime()",
            "SELECT getSetting('max_memory_usage')",
            "SELECT currentUser()",
            "SELECT getOSKernelVersion()",
            "SELECT queryID()",
            "SELECT sleep(3)",
        ]
    ),
    # other databases and system tables (grants stop these on a server; only the check in chdb)
    *(
        _case("scope", sql, False)
        for sql in [
            "SELECT * FROM system.processes",
            "SELECT name FROM system.tables",
            "SELECT * FROM system.settings",
            "SELECT * FROM INFORMATION_SCHEMA.COLUMNS",
            "SELECT * FROM information_schema.tables",
            "SELECT name FROM system.databases",
            "SELECT count() FROM nycflights13.airlines WHERE carrier IN (SELECT name FROM system.tables)",
        ]
    ),
    *(
        _case("scope", sql, True)  # the engine refuses these too (privileges, or no such table here)
        for sql in [
            "SELECT * FROM system.users",
            "SELECT query FROM system.query_log",
            "SELECT * FROM default.t",
        ]
    ),
    # a query parameter the agent never binds
    _case("parameter", "SELECT {p:String}", True),
    # malformed
    *(_case("malformed", sql, True) for sql in ["", "   ;  ", "SELECT 'unterminated", "SELECT \ud800"]),
]


async def _counts(db: Database) -> dict[str, int]:
    rows = await db.catalog_rows(
        "SELECT name, total_rows FROM system.tables WHERE database = 'nycflights13' ORDER BY name"
    )
    return {row["name"]: int(row["total_rows"]) for row in rows}


def test_corpus_is_large_enough() -> None:
    assert len(HOSTILE) >= 100


@pytest.mark.parametrize(("sql", "engine_stops"), HOSTILE)
async def test_hostile_statement_is_refused_with_a_clear_error(db: Database, sql: str, engine_stops: bool) -> None:
    OUTFILE.unlink(missing_ok=True)
    result = await db.execute(sql)
    assert not result.ok, f"ran: {sql!r} -> {result.rows}"
    assert result.error and len(result.error) < 600
    assert not OUTFILE.exists()
    assert "root:" not in result.error and "ANTHROPIC" not in result.error


@pytest.mark.parametrize(("sql", "engine_stops"), [c for c in HOSTILE if c.values[1] and c.values[0].strip(" ;")])
async def test_the_engine_alone_refuses_it(db: Database, sql: str, engine_stops: bool) -> None:
    """Bypass the statement check: the read-only, limited, confined engine must still refuse."""
    OUTFILE.unlink(missing_ok=True)
    with pytest.raises(EngineError):
        await db.backend.query(sql, "TSV", new_query_id())
    assert not OUTFILE.exists()


# With a default for failures, file() answers '' instead of raising: the engine alone must read nothing,
# on the pipeline threads too (every /proc/<pid>/environ on the host, the app's .env).
FILE_WITH_DEFAULT = [
    "SELECT groupUniqArray(file(concat('/proc/', toString(number), '/environ'), '')) FROM numbers(1, 5000)",
    "SELECT groupUniqArray(file(if(number < 100000, '/work/main/.env', 'x'), '')) FROM numbers(20000)",
    "SELECT groupUniqArray(file(if(number < 100000, '/etc/passwd', 'x'), '')) FROM numbers(20000)",
]


@pytest.mark.parametrize("sql", FILE_WITH_DEFAULT)
async def test_the_engine_alone_reads_nothing_outside_its_data(db: Database, sql: str) -> None:
    assert (await db.execute(sql)).error  # the check refuses file() first
    assert (await db.backend.query(sql, "TSV", new_query_id())).strip() == b"['']"


@pytest.mark.parametrize(("sql", "engine_stops"), [c for c in HOSTILE if not c.values[1]][:6])
async def test_the_check_is_the_only_line_for_these(db: Database, sql: str, engine_stops: bool) -> None:
    """Documented honestly: without the check, the embedded engine runs these."""
    await db.backend.query(sql, "TSV", new_query_id())


async def test_data_is_unchanged_after_the_whole_corpus(db: Database) -> None:
    assert await _counts(db) == DEMO_COUNTS
    for param in HOSTILE:
        await db.execute(param.values[0])
    assert await _counts(db) == DEMO_COUNTS
    assert not [r for r in await db.catalog_rows("SELECT name FROM system.databases") if r["name"] == "evil"]


@pytest.fixture
def scoped(db: Database) -> Database:
    """The session's engine, with planes excluded from the scope."""
    scope = Scope.of(["nycflights13"], ["nycflights13.planes", "*.secret*"])
    return Database(db.backend, scope=scope, functions=db.functions)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM nycflights13.planes",
        "SELECT * FROM planes",
        "SELECT tailnum FROM nycflights13.flights WHERE tailnum IN nycflights13.planes",
        "SELECT * FROM nycflights13.flights AS f JOIN nycflights13.planes AS p USING (tailnum)",
        "SELECT * FROM (SELECT * FROM (SELECT * FROM planes))",
        "WITH planes AS (SELECT 1 AS x) SELECT * FROM planes",
        "WITH a AS (SELECT * FROM planes), planes AS (SELECT 1) SELECT * FROM a",
        "SELECT * FROM merge('nycflights13', '^plan')",
        "SELECT joinGet('nycflights13.planes', 'year', 'N10156')",
        "SELECT hasColumnInTable('nycflights13', 'planes', 'year')",
    ],
)
async def test_excluded_tables_are_refused_like_a_write(scoped: Database, sql: str) -> None:
    result = await scoped.execute(sql)
    assert not result.ok, f"ran: {sql}"


async def test_ctes_and_in_scope_tables_still_work_with_exclusions(scoped: Database) -> None:
    ok = await scoped.execute(
        "WITH f AS (SELECT carrier FROM flights) SELECT count() FROM f WHERE carrier IN (SELECT carrier FROM airlines)"
    )
    assert ok.ok and ok.rows == [["336776"]]


async def test_hints_never_name_an_excluded_table(scoped: Database) -> None:
    result = await scoped.execute("SELECT * FROM nycflights13.plane")
    assert not result.ok
    assert "planes" not in (result.error or "") and "planes" not in (result.hint or "")
    unknown = await scoped.execute("SELECT * FROM nycflights13.fligts")
    assert "nycflights13.flights" in (unknown.hint or "")


async def test_huge_cells_cost_the_app_almost_nothing(db: Database) -> None:
    result = await db.execute("SELECT randomString(10000000) AS s FROM numbers(51)")
    assert result.ok and result.has_more and result.row_count == 50
    # 200 characters, each at most 4 bytes of invalid UTF-8 shown as replacement characters, plus the marker
    assert max(len(row[0] or "") for row in result.rows) < 200 * 4 + 30
    assert all((row[0] or "").endswith(" chars]") for row in result.rows)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 'file(' AS text, 'DROP TABLE x' AS other",
        "SELECT format('{} flights', count()) FROM nycflights13.flights",
        "SELECT 1 -- ; DROP TABLE nycflights13.flights",
        "/* INTO OUTFILE */ SELECT 1",
        "SELECT count() AS `settings` FROM nycflights13.airlines",
        "SELECT 'SELECT file(\\'/etc/passwd\\')' AS q",
        "SELECT `file` FROM (SELECT 1 AS `file`)",
    ],
)
async def test_harmless_lookalikes_run(db: Database, sql: str) -> None:
    result = await db.execute(sql)
    assert result.ok, result.error
