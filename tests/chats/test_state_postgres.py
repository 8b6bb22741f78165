"""The kit's state in PostgreSQL (AGENT_STATE_URL): the same tables as the SQLite file at the same schema
version, migrated once when several hosts start together, a newer schema refused, and the setting read
and redacted as the ClickHouse URL is."""

from __future__ import annotations

import os
import pwd
import re
import socket
import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest

import chats
from agent.config import ConfigError, Settings, load_settings
from chats import schema
from chats.state import ChatState
from chats.state_postgres import postgres_sql
from tests import postgres as postgres_fixture
from tests.postgres import PostgresServer, server_user


def _columns_postgres(url: str) -> dict[str, set[str]]:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
        ).fetchall()
    columns: dict[str, set[str]] = {}
    for table, column in found:
        columns.setdefault(table, set()).add(column)
    return columns


def _columns_sqlite(path: Path) -> dict[str, set[str]]:
    with sqlite3.connect(path) as conn:
        names = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {name: {row[1] for row in conn.execute(f"PRAGMA table_info({name})")} for name in names}


def _version(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute("SELECT version FROM schema_version")]


def test_postgres_has_the_sqlite_files_tables_at_the_same_version(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = postgres_server.new_database()
    ChatState(url).close()
    ChatState(tmp_path / "state.sqlite3").close()
    on_postgres = _columns_postgres(url)
    assert on_postgres.pop("schema_version") == {"version"}
    assert len(schema.POSTGRES_STEPS) == len(schema.STEPS) == schema.VERSION
    assert _version(url) == [schema.VERSION]
    # SQLite's implicit rowid is a column on PostgreSQL where the stores order by it.
    ordered = {table: columns - {"rowid"} for table, columns in on_postgres.items()}
    assert ordered == _columns_sqlite(tmp_path / "state.sqlite3")
    assert {t for t, c in on_postgres.items() if "rowid" in c} == {"queries", "thread_turns"}


def test_hosts_starting_together_migrate_once(postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    url = postgres_server.new_database()
    applied: list[str] = []
    steps = schema.POSTGRES_STEPS

    def counted(step: schema.Step) -> schema.Step:
        def run(conn: sqlite3.Connection) -> None:
            applied.append(step.__name__)
            step(conn)

        return run

    monkeypatch.setattr(schema, "POSTGRES_STEPS", tuple(counted(step) for step in steps))
    errors: list[BaseException] = []
    states: list[ChatState] = []

    def start() -> None:
        try:
            states.append(ChatState(url, workers=2))
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for state in states:
        state.close()
    assert errors == [] and len(states) == 6
    assert applied == [step.__name__ for step in steps], "each step once, in order"
    assert _version(url) == [schema.VERSION]


def test_a_database_from_a_newer_release_is_refused_in_one_line(postgres_server: PostgresServer) -> None:
    url = postgres_server.new_database()
    ChatState(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE schema_version SET version = %s", (schema.VERSION + 1,))
    with pytest.raises(schema.NewerSchema, match=f"schema version {schema.VERSION + 1};") as refused:
        ChatState(url)
    assert "\n" not in str(refused.value)
    assert _version(url) == [schema.VERSION + 1], "left as it was"


def test_the_state_url_names_the_backend_and_its_password_is_never_shown(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    assert Settings(agent_state_url="", agent_data_dir=tmp_path).agent_state_url == ""
    assert Settings(agent_state_url=f"sqlite://{tmp_path}/s.db").agent_state_url == f"{tmp_path}/s.db"
    with pytest.raises(ConfigError, match="AGENT_STATE_URL"):
        load_settings(agent_state_url="mysql://db/state")
    secret = Settings(agent_state_url="postgresql://app:hunter2@db.internal/agent")
    assert "hunter2" not in repr(secret) and "postgresql://app:***@db.internal/agent" in repr(secret)
    url = postgres_server.new_database().replace("postgres@", "postgres:unused@")  # trust ignores it
    state = ChatState.of(Settings(agent_state_url=url, agent_data_dir=tmp_path))
    try:
        assert "unused" not in str(state.path) and state.pacing.shared, "other hosts may share it"
    finally:
        state.close()
    assert not (tmp_path / "state.sqlite3").exists()


def test_placeholders_become_psycopgs_outside_quoted_text() -> None:
    """psycopg reads `%` anywhere in a statement with parameters, quoted text included: there it is doubled."""
    assert postgres_sql("SELECT ? WHERE a = :name AND b = '?:x%' AND c LIKE '%'") == (
        "SELECT %s WHERE a = %(name)s AND b = '?:x%%' AND c LIKE '%%'"
    )
    assert postgres_sql("SELECT x % 2, y::text FROM t") == "SELECT x %% 2, y::text FROM t"
    assert postgres_sql("CREATE TABLE t (a REAL, b INTEGER, c TEXT DEFAULT 'REAL')") == (
        "CREATE TABLE t (a DOUBLE PRECISION, b BIGINT, c TEXT DEFAULT 'REAL')"
    )


def test_the_server_runs_as_an_unprivileged_user_when_the_tests_run_as_root(postgres_server: PostgresServer) -> None:
    """initdb refuses root, and CI runs as root: there the server is the `postgres` user's (or nobody's)."""
    with psycopg.connect(postgres_server.url()) as conn:
        data = Path(conn.execute("SHOW data_directory").fetchone()[0])
    owner = data.stat().st_uid
    expected = pwd.getpwnam(server_user()).pw_uid if os.geteuid() == 0 else os.geteuid()  # type: ignore[arg-type]
    assert owner == expected and (os.geteuid() != 0 or owner != 0)


def test_debians_binaries_are_found_off_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = sorted(Path(postgres_fixture.DEBIAN_BINARIES).glob("*/bin/initdb"))
    if not installed:
        pytest.skip("no Debian PostgreSQL package under /usr/lib/postgresql")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert postgres_fixture.binaries() == installed[-1].parent


def test_without_postgres_a_test_skips_saying_why_except_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres_fixture, "binaries", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install postgresql"), postgres_fixture.running_postgres():
        pass
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="PostgreSQL is needed in CI"), postgres_fixture.running_postgres():
        pass


def test_a_database_out_of_reach_stops_start_up_in_one_line_without_its_password(
    postgres_server: PostgresServer,
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConfigError, match=r"^AGENT_STATE_URL: cannot reach postgresql://app:\*\*\*@127\.0\.0\.1") as e:
        ChatState(f"postgresql://app:hunter2@127.0.0.1:{port}/agent")
    assert "\n" not in str(e.value) and "hunter2" not in str(e.value)
    missing = postgres_server.url("no_such_database")
    with pytest.raises(ConfigError, match='database "no_such_database" does not exist'):
        ChatState(missing)


def test_the_stores_keep_to_sql_both_backends_read() -> None:
    """SQLite's own syntax would fail on PostgreSQL only: the stores say it the standard way (`ON
    CONFLICT`, a Python date, `has_table`); only the backends' own modules speak their dialect. (`rowid` is
    a column on PostgreSQL where the stores order by it: see the tables' test above.)"""
    sqlite_only = re.compile(r"OR IGNORE|OR REPLACE|PRAGMA|sqlite_master|julianday\(|\b(?:date|datetime)\([?']")
    backends = {"state_file.py", "state_postgres.py", "schema.py", "state.py"}
    found = {
        path.name: sorted(set(sqlite_only.findall(path.read_text())))
        for path in sorted(Path(chats.__file__).parent.glob("*.py"))
        if path.name not in backends
    }
    assert {name: words for name, words in found.items() if words} == {}


def test_a_percent_sign_in_quoted_text_reaches_postgresql_as_it_is_written(postgres_server: PostgresServer) -> None:
    """Kept single, psycopg took `'%'` for a placeholder: "only '%s', '%b', '%t' are allowed"."""
    state = ChatState(postgres_server.new_database())
    try:
        rows = state.file.now(lambda c: c.execute("SELECT 'a%b' AS v, ? AS w WHERE 'x' LIKE '%'", ("5%",)).fetchall())
        assert [(row["v"], row["w"]) for row in rows] == [("a%b", "5%")]
    finally:
        state.close()
