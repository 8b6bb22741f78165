"""Pacing for every adapter: how many questions a client may ask a minute, and one answer at a time
per conversation.

In one process both live in memory. With several worker processes (`agent serve --workers N`) they
live in the app's SQLite file, so a client's budget counts its questions wherever they land, and the
messages of one Slack thread are answered in the order they arrived whichever worker received them
(each answer reads the one before it as history). A worker that dies holding a turn stops beating,
and the next message goes ahead after `DEAD_AFTER_S`.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from agent.live_runs import BEAT_S, DEAD_AFTER_S
from agent.sqlite_file import SqliteFile, write_transaction

log = logging.getLogger(__name__)

WINDOW_S = 60.0
TURN_POLL_S = 0.1  # how often a message waiting for its thread's turn looks again (several workers)
MAX_LOCAL_KEYS = 10_000  # idle clients are forgotten beyond this, so memory stays bounded

SCHEMA = """
CREATE TABLE IF NOT EXISTS pace_takes (scope TEXT NOT NULL, key TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS pace_takes_by_key ON pace_takes (scope, key, at);
CREATE INDEX IF NOT EXISTS pace_takes_by_time ON pace_takes (at);
CREATE TABLE IF NOT EXISTS turn_tickets (
    ticket INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    beat_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS turn_tickets_by_key ON turn_tickets (key, ticket);
"""


class RateLimit(ABC):
    """At most `per_minute` takes per key in any sliding window of `window_s`."""

    def __init__(self, per_minute: int, window_s: float = WINDOW_S) -> None:
        self.per_minute, self.window_s = per_minute, window_s

    @abstractmethod
    async def take(self, key: str) -> float | None:
        """None when `key` may go ahead now (and it is counted); otherwise seconds until it may."""


class LocalRateLimit(RateLimit):
    def __init__(self, per_minute: int, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic):
        super().__init__(per_minute, window_s)
        self._clock = clock
        self._seen: dict[str, deque[float]] = {}

    async def take(self, key: str) -> float | None:
        now = self._clock()
        seen = self._seen.setdefault(key, deque())
        while seen and now - seen[0] >= self.window_s:
            seen.popleft()
        if len(seen) >= self.per_minute:
            return self.window_s - (now - seen[0])
        seen.append(now)
        if len(self._seen) > MAX_LOCAL_KEYS:
            for idle in [k for k, v in self._seen.items() if not v or now - v[-1] >= self.window_s]:
                del self._seen[idle]
        return None


class SharedRateLimit(RateLimit):
    def __init__(
        self,
        file: SqliteFile,
        scope: str,
        per_minute: int,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.time,  # wall time: the processes share it
    ) -> None:
        super().__init__(per_minute, window_s)
        self._file, self._scope, self._clock = file, scope, clock

    async def take(self, key: str) -> float | None:
        now = self._clock()

        def take(c: sqlite3.Connection) -> float | None:
            with write_transaction(c):  # count and add under one lock: two workers cannot both take the last
                c.execute("DELETE FROM pace_takes WHERE at <= ?", (now - self.window_s,))
                count, oldest = c.execute(
                    "SELECT count(*), min(at) FROM pace_takes WHERE scope = ? AND key = ?", (self._scope, key)
                ).fetchone()
                if count >= self.per_minute:
                    return float(self.window_s - (now - oldest))
                c.execute("INSERT INTO pace_takes VALUES (?, ?, ?)", (self._scope, key, now))
                return None

        return await self._file.run(take)


class Pacing:
    """Rate limits and turns for one process: in memory, or through the SQLite file at `shared_path`
    for a process that is one of several workers."""

    def __init__(self, shared_path: Path | None = None) -> None:
        self._file: SqliteFile | None = None
        if shared_path is not None:
            self._file = SqliteFile(shared_path)
            self._file.now(lambda c: c.executescript(SCHEMA))
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @property
    def shared(self) -> bool:
        return self._file is not None

    def rate_limit(self, scope: str, per_minute: int) -> RateLimit:
        if self._file is None:
            return LocalRateLimit(per_minute)
        return SharedRateLimit(self._file, scope, per_minute)

    def turn(self, key: str) -> AbstractAsyncContextManager[None]:
        """Hold `key`'s turn: callers with the same key go one at a time, first come first served."""
        return self._local_turn(key) if self._file is None else self._shared_turn(self._file, key)

    @asynccontextmanager
    async def _local_turn(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)  # asyncio.Lock wakes waiters in order
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    @asynccontextmanager
    async def _shared_turn(self, file: SqliteFile, key: str) -> AsyncIterator[None]:
        ticket = await file.run(lambda c: _take_ticket(c, key))
        beating = asyncio.create_task(_beat(file, ticket))
        try:
            while await file.run(lambda c: _first_live_ticket(c, key)) != ticket:
                await asyncio.sleep(TURN_POLL_S)
            yield
        finally:
            beating.cancel()
            await asyncio.shield(file.run(lambda c: c.execute("DELETE FROM turn_tickets WHERE ticket = ?", (ticket,))))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _take_ticket(c: sqlite3.Connection, key: str) -> int:
    now = time.time()
    with write_transaction(c):
        c.execute("DELETE FROM turn_tickets WHERE beat_at <= ?", (now - DEAD_AFTER_S,))  # their workers died
        ticket = c.execute("INSERT INTO turn_tickets (key, beat_at) VALUES (?, ?)", (key, now)).lastrowid
    assert ticket is not None
    return ticket


def _first_live_ticket(c: sqlite3.Connection, key: str) -> int | None:
    row = c.execute(
        "SELECT min(ticket) FROM turn_tickets WHERE key = ? AND beat_at > ?", (key, time.time() - DEAD_AFTER_S)
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else None


async def _beat(file: SqliteFile, ticket: int) -> None:
    """While a ticket waits or holds its turn, its worker says it is alive."""
    while True:
        await asyncio.sleep(BEAT_S)
        try:
            await file.run(lambda c: _refresh(c, ticket))
        except sqlite3.Error:  # a missed beat or two is harmless; many make the others go ahead
            log.warning("could not refresh a conversation's turn", exc_info=True)


def _refresh(c: sqlite3.Connection, ticket: int) -> None:
    c.execute("UPDATE turn_tickets SET beat_at = ? WHERE ticket = ?", (time.time(), ticket))
