"""Runs in progress, seen from another process: with several workers (`agent serve --workers N`), a page
that reconnects may reach a worker other than the one running its answer.

The owning worker copies each run's events into the shared SQLite file (batched, a few times a second)
and removes them once the run is done and its turn is stored; while the run lasts it also beats (a
time it refreshes every second). Another worker follows by polling, and marks the run as watched so
the owner does not cancel it as abandoned. A run whose owner stopped beating (it crashed, or was
killed) ends with an error for its readers, not a wait that never ends. Liveness is the heartbeat, not
a pid: pids are reused, above all in a container restarted on the same volume.

On PostgreSQL (several hosts) a reader is pushed to, not left to poll: each write of a run's events
NOTIFYs its id, and `waiting(run_id)` is woken by it through the one listening connection of the
process (chats/state_postgres.py Notices). A reader's heartbeat (`touch`) also NOTIFYs that the run is
watched: from then on its owner copies events as they come (`watched`), not on its timer, which it
keeps while nobody elsewhere watches. Each kind of write and read is made for all of the process's runs
at once (chats/shared_runs_postgres.py): a busy host's copies cost a few round trips, not one a run. The
notice of a copy carries its events when they fit in PostgreSQL's payload (8000 bytes), so a reader that
has every event before them needs no read at all (`carried`); one that missed a notice (a gap in the
numbers, one too large, a reconnect) reads the table. SQLite's workers keep polling: they share one
machine and the file has no such signal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from chats.shared_runs_postgres import Copy, GroupedLog, Opening
from chats.state_file import StateFile, write_transaction
from chats.state_postgres import POSTGRES_NOW, Notices, PostgresFile, Woken

log = logging.getLogger(__name__)


BEAT_S = 1.0  # how often the owner of a run says it is alive
DEAD_AFTER_S = 10.0  # a run whose owner has not beaten for this long is dead
CHANNEL = "agent_runs"  # PostgreSQL's channel for "this run has news"; the payload is the run's id
WATCHED = "watched:"  # the payload's prefix for "a reader on another host follows this run"


@dataclass
class LiveRun:
    conversation_id: str
    beat_at: float
    watched_at: float
    policy: str = ""  # the name of the policy it runs under ("": none recorded, covered by no reader)
    read_at: float | None = None  # the clock its beats are stamped by, when it was read (None: this host's)

    @property
    def owner_alive(self) -> bool:
        now = self.read_at if self.read_at is not None else time.time()
        return now - self.beat_at < DEAD_AFTER_S


class SharedRunLog:
    def __init__(self, file: StateFile) -> None:
        self._file = file  # the kit's state file (chats/state.py)
        self._notices: Notices | None = file.notices(CHANNEL) if isinstance(file, PostgresFile) else None
        # On PostgreSQL every write and read of the log is made with other runs' (chats/shared_runs_postgres.py).
        self._grouped = GroupedLog(file, CHANNEL) if isinstance(file, PostgresFile) else None
        self._watches: dict[str, tuple[ExitStack, asyncio.Event, float]] = {}  # this process's runs, opened when
        # Beats are stamped and judged by one clock: the database's on PostgreSQL (hosts' clocks differ, and a
        # host whose clock runs ahead would sweep others' live runs), this machine's on SQLite.
        self._now = POSTGRES_NOW if isinstance(file, PostgresFile) else None
        self._file.now(partial(_forget_dead_owners, now=self._now))

    @property
    def pushes(self) -> bool:
        """Whether readers are woken by each write (PostgreSQL), so the owner should write as events come."""
        return self._notices is not None

    @contextmanager
    def waiting(self, run_id: str) -> Iterator[Woken]:
        """An event set when the run has news for its readers (never, on SQLite: there they poll)."""
        if self._notices is None:
            yield Woken()
            return
        with self._notices.waiting(run_id) as woken:
            yield woken

    def watched(self, run_id: str) -> asyncio.Event | None:
        """For the owner of an open run: set once a reader on another host follows it (None on SQLite)."""
        found = self._watches.get(run_id)
        return found[1] if found is not None else None

    def _seen_watched(self, run_id: str, watched_at: float | None) -> None:
        """A beat read the run's `watched_at`: past its opening, a reader elsewhere follows it (its notice may
        have been sent before this process listened)."""
        found = self._watches.get(run_id)
        if found is not None and watched_at is not None and watched_at > found[2]:
            found[1].set()

    async def open(self, run_id: str, conversation_id: str, policy: str = "") -> None:
        now = time.time()
        if self._notices is not None:  # listening before any reader can find the run
            stack = ExitStack()
            watched = stack.enter_context(self._notices.waiting(WATCHED + run_id, on_reconnect=False))
            self._watches[run_id] = (stack, watched, now)
        if self._grouped is not None:
            await self._grouped.opens(Opening(run_id, conversation_id, now, policy))
            return

        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO live_runs (run_id, conversation_id, beat_at, watched_at, policy) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET conversation_id = excluded.conversation_id, "
                "beat_at = excluded.beat_at, watched_at = excluded.watched_at, policy = excluded.policy",
                (run_id, conversation_id, now, now, policy),
            )
            self._notify(c, run_id)

        await self._file.run(write)

    async def add(
        self, run_id: str, events: list[tuple[int, str, dict[str, Any]]], *, beat: bool, holder: str | None = None
    ) -> bool:
        """New events of a run (possibly none), and with `beat`, a heartbeat, in one transaction. With `holder`
        (a durable run's host, chats/durable.py), nothing is written once another host holds the run: a host
        that froze past its lease never writes into the log of the host that took it over. False then."""
        rows = [(run_id, number, name, _as_json(data)) for number, name, data in events]
        if self._grouped is not None:
            if not rows and not beat:
                return True
            written, watched_at = await self._grouped.copies(Copy(run_id, rows, time.time() if beat else None, holder))
            self._seen_watched(run_id, watched_at)
            return written

        def write(c: sqlite3.Connection) -> bool:
            with write_transaction(c):
                if holder is not None and c.execute(_FENCED, {"run": run_id, "holder": holder}).fetchone():
                    return False
                c.executemany("INSERT INTO live_events VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING", rows)
                if beat:
                    c.execute("UPDATE live_runs SET beat_at = ? WHERE run_id = ?", (time.time(), run_id))
                return True

        return bool(await self._file.run(write))

    async def close(self, run_id: str, *, holder: str | None = None) -> None:
        """The run taken out of the log; with `holder`, not once another host holds it (as `add`)."""
        if (watch := self._watches.pop(run_id, None)) is not None:
            watch[0].close()
        if self._grouped is not None:
            await self._grouped.closes((run_id, holder))  # readers look for the stored turn now
            return

        def write(c: sqlite3.Connection) -> None:
            with write_transaction(c):
                if holder is not None and c.execute(_TAKEN, (run_id, holder)).fetchone() is not None:
                    return
                _delete(c, run_id)
            self._notify(c, run_id)  # readers look for the stored turn now

        await self._file.run(write)

    def _notify(self, c: sqlite3.Connection, payload: str) -> None:
        if self._notices is not None:
            c.execute("SELECT pg_notify(?, ?)", (CHANNEL, payload))

    def stop_listening(self) -> None:
        """The process's state is closing."""
        if self._notices is not None:
            self._notices.close()

    async def find(self, run_id: str) -> LiveRun | None:
        now = self._now or "NULL"
        row = await self._file.run(
            lambda c: c.execute(
                f"SELECT conversation_id, beat_at, watched_at, policy, {now} FROM live_runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        )
        return LiveRun(row[0], row[1], row[2], row[3], row[4]) if row else None

    async def events_after(self, run_id: str, after: int) -> list[tuple[int, str, dict[str, Any]]]:
        if self._grouped is not None:
            found = await self._grouped.reads((run_id, after))
            return [(number, name, json.loads(data)) for number, name, data in found]
        rows = await self._file.run(
            lambda c: c.execute(
                "SELECT id, event, data FROM live_events WHERE run_id = ? AND id > ? ORDER BY id", (run_id, after)
            ).fetchall()
        )
        return [(number, name, json.loads(data)) for number, name, data in rows]

    @staticmethod
    def carried(woken: Woken, after: int) -> tuple[list[tuple[int, str, dict[str, Any]]], bool] | None:
        """The events after `after` that the notices which woke `woken` carried, if they go on from `after` with
        none missing ([] if the reader had them all already, or nothing woke it: a notice would have), and
        whether any notice carried events at all (its owner wrote them: it is there, and the run open); None if
        the reader must read the table (a bare notice: a close, an opening or a reconnect; or a gap: a notice
        too large to carry its events, or one dropped). Carried events up to `done` need no read whatever else
        came: nothing after it matters (a run's last copy and its close come together)."""
        texts, bare = woken.take()
        fresh, position = [], after
        for number, name, data in (event for text in texts for event in json.loads(text)):
            if number == position + 1:
                fresh.append((number, name, data))
                position = number
            elif number > position:
                return None
        ended = any(name == "done" for _, name, _ in fresh)
        return (fresh, bool(texts)) if ended or not bare else None

    async def touch(self, run_id: str) -> LiveRun | None:
        """A reader in another process is watching: the owner must not cancel the run as abandoned (and, on
        PostgreSQL, copies its events as they come from now on). Returns the run as `find` does: one round
        trip for both."""
        if self._grouped is not None:
            row = await self._grouped.touches((run_id, time.time(), WATCHED + run_id))
            return LiveRun(*row) if row is not None else None

        def write(c: sqlite3.Connection) -> Any:
            return c.execute(
                "UPDATE live_runs SET watched_at = ? WHERE run_id = ? "
                "RETURNING conversation_id, beat_at, watched_at, policy",
                (time.time(), run_id),
            ).fetchone()

        row = await self._file.run(write)
        return LiveRun(row[0], row[1], row[2], row[3]) if row else None


def _as_json(data: dict[str, Any]) -> str:
    """An event's data as JSON text the database can hold: as written, but with every non-ASCII character
    escaped when it has a lone surrogate (JSON may name one, and Python keeps it; UTF-8 cannot encode it)."""
    text = json.dumps(data, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        return json.dumps(data)  # read back as the same str
    return text


# A durable run another host holds (its holder is not the writer): the writer's copy is fenced out.
_TAKEN = "SELECT 1 FROM durable_runs WHERE run_id = ? AND holder <> ?"
# A copy is fenced out too once the durable run is over (no durable row, and its log closed): another host
# finished it. Its own host's last copy comes before its close, while the live_runs row is there.
_FENCED = """SELECT 1 WHERE EXISTS (SELECT 1 FROM durable_runs WHERE run_id = :run AND holder <> :holder)
    OR (NOT EXISTS (SELECT 1 FROM durable_runs WHERE run_id = :run)
        AND NOT EXISTS (SELECT 1 FROM live_runs WHERE run_id = :run))"""


def _forget_dead_owners(c: sqlite3.Connection, *, now: str | None) -> None:
    """`now`: the clock beats are stamped by, in SQL (None: this host's)."""
    # A run kept for a takeover (chats/durable.py) keeps its log: the host taking it over goes on with it.
    dead = c.execute(
        f"SELECT run_id FROM live_runs WHERE beat_at < {now or '?'} - ? "
        "AND run_id NOT IN (SELECT run_id FROM durable_runs)",
        (DEAD_AFTER_S,) if now else (time.time(), DEAD_AFTER_S),
    ).fetchall()
    for (run_id,) in dead:
        with write_transaction(c):
            _delete(c, run_id)


def _delete(c: sqlite3.Connection, run_id: str) -> None:
    """Inside a write transaction the caller holds."""
    c.execute("DELETE FROM live_events WHERE run_id = ?", (run_id,))
    c.execute("DELETE FROM live_runs WHERE run_id = ?", (run_id,))
