"""The kit's SQLite file, as the kit's state (chats/state.py) opens it: WAL, one connection per process
that every store uses from worker threads under a lock, and write transactions that wait for another
process's lock (several worker processes may share the file) rather than fail."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class SqliteFile:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10)
        self._conn.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode = WAL")
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


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    # IMMEDIATE takes the write lock up front: a deferred transaction that reads and then writes
    # fails at once when another process got the lock in between, instead of waiting for it.
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
