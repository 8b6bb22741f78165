"""One answer at a time per conversation, for every adapter.

In one process a conversation's turn is a lock in memory. With several worker processes (`agent serve
--workers N`) it is a line of tickets in the app's SQLite file, so the messages of one Slack thread are
answered one at a time in the order of their ts, whichever worker received them (each answer reads the
ones before it as history). A line's place is a row that its worker beats every `BEAT_S`: a worker that
dies holding a turn stops beating, and the next message goes ahead after `DEAD_AFTER_S`; a worker whose
beats were merely late puts its row back.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from chats.shared_runs import BEAT_S, DEAD_AFTER_S
from chats.state_file import STATE_ERRORS, STATE_UNAVAILABLE, StateFile, write_transaction

log = logging.getLogger(__name__)

TURN_POLL_S = 0.1  # how often a message waiting for its thread's turn looks again (several workers)


class Turns:
    """Callers with the same key go one at a time: in memory, or through `file` when the process is one
    of several workers."""

    def __init__(self, file: StateFile | None = None) -> None:
        self._file = file
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._leaving: set[asyncio.Task[None]] = set()

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
    async def _shared_turn(self, file: StateFile, key: str, position: int) -> AsyncIterator[None]:
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
            "INSERT INTO thread_turns VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (self.token, self.key, self.position, now, int(self.holding)),
        )

    def leave(self, c: sqlite3.Connection) -> None:
        """Give up the turn, and sweep the rows of this line whose workers died."""
        self.left = True
        c.execute(
            "DELETE FROM thread_turns WHERE token = ? OR (key = ? AND beat_at <= ?)",
            (self.token, self.key, time.time() - DEAD_AFTER_S),
        )


async def _leave(file: StateFile, ticket: Ticket, joining: asyncio.Future[None]) -> None:
    await asyncio.wait([joining])  # cancelled as it joined: the row is written all the same, then removed
    try:
        await file.run(ticket.leave)
    except STATE_ERRORS:  # the next caller goes ahead once the row stops beating
        log.warning("could not give up a conversation's turn", exc_info=True)


async def _try_take(file: StateFile, ticket: Ticket) -> bool:
    try:
        return await file.run(ticket.take)
    except STATE_UNAVAILABLE:  # the file is busy or locked for a moment: look again
        log.warning("could not look at a conversation's line", exc_info=True)
        return False


async def _beat(file: StateFile, ticket: Ticket) -> None:
    """While a ticket waits or holds its turn, its worker says it is alive."""
    while True:
        await asyncio.sleep(BEAT_S)
        try:
            await file.run(ticket.beat)
        except STATE_ERRORS:  # a missed beat or two is harmless; many make the others go ahead
            log.warning("could not refresh a conversation's turn", exc_info=True)
