"""The kit's SQLite file, as the kit's state (chats/state.py) opens it: WAL, one connection per process
that every store uses from worker threads under a lock, and write transactions that wait for another
process's lock (several worker processes may share the file) rather than fail.

`StateFile` is what every store is written against: a function given a connection with the part of
sqlite3's API the stores use (`execute`, `executemany`, rows by position and name). PostgreSQL
(chats/state_postgres.py) offers the same, so each store keeps one copy of its SQL.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, TypeVar

import psycopg

T = TypeVar("T")

# What a store's call may raise on either backend: any failure; and the state being busy, unreachable or
# broken (a lock held past the wait, a server gone, a table missing: what SQLite calls OperationalError),
# which some stores ride out or refuse on, rather than a bug in the SQL.
STATE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, psycopg.Error)
STATE_UNAVAILABLE: tuple[type[Exception], ...] = (
    sqlite3.OperationalError,
    psycopg.OperationalError,
    psycopg.ProgrammingError,
)

# The database's clock in SQL, in seconds since the epoch (chats/durable.py judges leases by it).
SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


class StateFile(Protocol):
    """Where the kit's state lives: this SQLite file or a PostgreSQL database."""

    def now(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    def close(self) -> None: ...


class SqliteFile:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10)
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            _switch_to_wal(self._conn)
            # In WAL mode NORMAL is durable across crashes of this process; only a power loss can
            # lose the last commits. FULL would fsync every question's three writes.
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute("PRAGMA foreign_keys = ON")

    def now(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` on the connection, in this thread (start-up work)."""
        with self._lock:
            return fn(self._conn)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` on the connection, in a worker thread, so the event loop never waits on the disk."""
        return await asyncio.to_thread(self.now, fn)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _switch_to_wal(conn: sqlite3.Connection, *, patience: float = 10.0) -> None:
    # Switching a new file to WAL needs the file alone, and SQLite answers "database is locked" at once,
    # without its busy handler, when another process opening the same new file holds it for a moment
    # (workers starting together). Wait for it as a write would, then give the same error.
    deadline = time.monotonic() + patience
    pause = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One transaction that writers take in turn across every process sharing the state."""
    if not isinstance(conn, sqlite3.Connection):  # PostgreSQL's connection has its own (state_postgres.py)
        with conn.write_transaction():  # type: ignore[attr-defined]
            yield
        return
    # IMMEDIATE takes the write lock up front: a deferred transaction that reads and then writes
    # fails at once when another process got the lock in between, instead of waiting for it.
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def has_table(conn: sqlite3.Connection, table: str) -> bool:
    """Whether the state has `table` (one an older schema lacks), on either backend."""
    if isinstance(conn, sqlite3.Connection):
        return bool(conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone())
    # A query of the catalog, not to_regclass: that reads a cache a transaction refreshes only as it locks
    # a table, so under the advisory lock it can miss the table another host has just made.
    found = conn.execute("SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?", (table,))
    return found.fetchone() is not None
