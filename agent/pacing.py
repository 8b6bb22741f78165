"""Pacing for every adapter: how many questions a client may ask a minute, and one answer at a time
per conversation.

In one process both live in memory. With several worker processes (`agent serve --workers N`) they
live in the app's SQLite file, so a client's budget counts its questions wherever they land, and the
messages of one Slack thread are answered one at a time in the order of their ts, whichever worker
received them (each answer reads the ones before it as history). A line's place is a row that its
worker beats every `BEAT_S`: a worker that dies holding a turn stops beating, and the next message
goes ahead after `DEAD_AFTER_S`; a worker whose beats were merely late puts its row back.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
import uuid
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from functools import partial
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
CREATE INDEX IF NOT EXISTS pace_takes_by_time ON pace_takes (scope, at);
CREATE TABLE IF NOT EXISTS thread_turns (
    token TEXT PRIMARY KEY,
    key TEXT NOT NULL,
    position INTEGER NOT NULL,
    beat_at REAL NOT NULL,
    holding INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS thread_turns_by_key ON thread_turns (key, position);
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
        self._refused_until: dict[str, float] = {}
        self._swept_at = 0.0

    async def take(self, key: str) -> float | None:
        # A refused client is answered from memory until its wait is over: a flood of refused requests
        # costs no write to the file every worker shares.
        if (until := self._refused_until.get(key)) is not None:
            if (left_s := until - self._clock()) > 0:
                return left_s
            del self._refused_until[key]
        try:
            wait = await self._file.run(partial(self._take, key))
        except sqlite3.OperationalError:  # the shared file is locked or busy: serve the request, say so
            log.warning("could not count a request against its rate limit; letting it through", exc_info=True)
            return None
        if wait is not None:
            self._refused_until[key] = self._clock() + wait
            if len(self._refused_until) > MAX_LOCAL_KEYS:
                now = self._clock()
                self._refused_until = {k: t for k, t in self._refused_until.items() if t > now}
        return wait

    def _take(self, key: str, c: sqlite3.Connection) -> float | None:
        with write_transaction(c):  # count and add under one lock: two workers cannot both take the last
            now = self._clock()  # under the lock, so no take is older than one counted before it
            horizon = now - self.window_s
            if now - self._swept_at >= self.window_s:  # idle clients' takes
                c.execute("DELETE FROM pace_takes WHERE scope = ? AND at <= ?", (self._scope, horizon))
                self._swept_at = now
            # Takes out of the window, and any "from the future" (the clock was stepped back), no longer count.
            c.execute(
                "DELETE FROM pace_takes WHERE scope = ? AND key = ? AND (at <= ? OR at > ?)",
                (self._scope, key, horizon, now),
            )
            count, oldest = c.execute(
                "SELECT count(*), min(at) FROM pace_takes WHERE scope = ? AND key = ?", (self._scope, key)
            ).fetchone()
            if count >= self.per_minute:
                return max(0.0, oldest - horizon)
            c.execute("INSERT INTO pace_takes VALUES (?, ?, ?)", (self._scope, key, now))
            return None


class Pacing:
    """Rate limits and turns for one process: in memory, or through the SQLite file at `shared_path`
    for a process that is one of several workers."""

    def __init__(self, shared_path: Path | None = None) -> None:
        self._file: SqliteFile | None = None
        if shared_path is not None:
            self._file = SqliteFile(shared_path)
            self._file.now(lambda c: c.executescript(SCHEMA))
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._leaving: set[asyncio.Task[None]] = set()

    @property
    def shared(self) -> bool:
        return self._file is not None

    def rate_limit(self, scope: str, per_minute: int) -> RateLimit:
        if self._file is None:
            return LocalRateLimit(per_minute)
        return SharedRateLimit(self._file, scope, per_minute)

    def turn(self, key: str, position: int | None = None) -> AbstractAsyncContextManager[None]:
        """Hold `key`'s turn: callers with the same key go one at a time. In one process, first come first
        served; across workers, in order of `position` (a Slack message's ts in microseconds; by default
        the time of asking)."""
        if self._file is None:
            return self._local_turn(key)
        return self._shared_turn(self._file, key, time.time_ns() // 1000 if position is None else position)

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
    async def _shared_turn(self, file: SqliteFile, key: str, position: int) -> AsyncIterator[None]:
        ticket = Ticket(uuid.uuid4().hex, key, position)
        joining = asyncio.ensure_future(file.run(ticket.join))
        beating: asyncio.Task[None] | None = None
        try:
            await asyncio.shield(joining)
            beating = asyncio.create_task(_beat(file, ticket))
            while not await _try_take(file, ticket):
                await asyncio.sleep(TURN_POLL_S)
            yield
        finally:
            if beating is not None:
                beating.cancel()
            # A task of its own: a cancellation landing on any await here must not keep the row in line.
            leaving = asyncio.create_task(_leave(file, ticket, joining))
            self._leaving.add(leaving)
            leaving.add_done_callback(self._leaving.discard)
            await asyncio.shield(leaving)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


@dataclass
class Ticket:
    """One caller's place in a conversation's line, in the shared file. The turn goes to the first live
    ticket by position once no live ticket holds it, so one that joins late with an earlier position
    waits for the holder rather than running beside it. Its methods run under the file's lock, so a
    beat still in flight when the caller leaves cannot put the row back."""

    token: str
    key: str
    position: int
    holding: bool = False
    left: bool = False

    def join(self, c: sqlite3.Connection) -> None:
        now = time.time()
        with write_transaction(c):
            c.execute("DELETE FROM thread_turns WHERE beat_at <= ?", (now - DEAD_AFTER_S,))  # their workers died
            self._insert(c, now)

    def take(self, c: sqlite3.Connection) -> bool:
        """Take the turn if it is this ticket's: a read while others are ahead, a write when it may be."""
        if not self._next(c):
            return False
        with write_transaction(c):  # again under the write lock: another worker may have just taken it
            if not self._next(c):
                return False
            c.execute("UPDATE thread_turns SET holding = 1 WHERE token = ?", (self.token,))
        self.holding = True
        return True

    def _next(self, c: sqlite3.Connection) -> bool:
        row = c.execute(
            "SELECT token, holding FROM thread_turns WHERE key = ? AND beat_at > ? "
            "ORDER BY holding DESC, position, rowid LIMIT 1",
            (self.key, time.time() - DEAD_AFTER_S),
        ).fetchone()
        return row is not None and row[0] == self.token and not row[1]

    def beat(self, c: sqlite3.Connection) -> None:
        """Say this caller is alive; if its row was taken for dead's (its beats were late: a worker
        stalled for DEAD_AFTER_S loses its turn, as a dead one does), put it back in its place."""
        if self.left:
            return
        now = time.time()
        if c.execute("UPDATE thread_turns SET beat_at = ? WHERE token = ?", (now, self.token)).rowcount == 0:
            log.warning("a conversation's turn was given up for lost; taking its place again")
            self._insert(c, now)

    def _insert(self, c: sqlite3.Connection, now: float) -> None:
        c.execute(
            "INSERT OR IGNORE INTO thread_turns VALUES (?, ?, ?, ?, ?)",
            (self.token, self.key, self.position, now, int(self.holding)),
        )

    def leave(self, c: sqlite3.Connection) -> None:
        """Give up the turn, and sweep the rows of this line whose workers died."""
        self.left = True
        c.execute(
            "DELETE FROM thread_turns WHERE token = ? OR (key = ? AND beat_at <= ?)",
            (self.token, self.key, time.time() - DEAD_AFTER_S),
        )


async def _leave(file: SqliteFile, ticket: Ticket, joining: asyncio.Future[None]) -> None:
    await asyncio.wait([joining])  # cancelled as it joined: the row is written all the same, then removed
    try:
        await file.run(ticket.leave)
    except sqlite3.Error:  # the next caller goes ahead once the row stops beating
        log.warning("could not give up a conversation's turn", exc_info=True)


async def _try_take(file: SqliteFile, ticket: Ticket) -> bool:
    try:
        return await file.run(ticket.take)
    except sqlite3.OperationalError:  # the file is busy or locked for a moment: look again
        log.warning("could not look at a conversation's line", exc_info=True)
        return False


async def _beat(file: SqliteFile, ticket: Ticket) -> None:
    """While a ticket waits or holds its turn, its worker says it is alive."""
    while True:
        await asyncio.sleep(BEAT_S)
        try:
            await file.run(ticket.beat)
        except sqlite3.Error:  # a missed beat or two is harmless; many make the others go ahead
            log.warning("could not refresh a conversation's turn", exc_info=True)
