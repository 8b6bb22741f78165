"""Runs in progress, seen from another process: with several workers (`agent serve --workers N`), a page
that reconnects may reach a worker other than the one running its answer.

The owning worker copies each run's events into the shared SQLite file (batched, a few times a second)
and removes them once the run is done and its turn is stored; while the run lasts it also beats (a
time it refreshes every second). Another worker follows by polling, and marks the run as watched so
the owner does not cancel it as abandoned. A run whose owner stopped beating (it crashed, or was
killed) ends with an error for its readers, not a wait that never ends. Liveness is the heartbeat, not
a pid: pids are reused, above all in a container restarted on the same volume.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from chats.state_file import StateFile, write_transaction

log = logging.getLogger(__name__)


BEAT_S = 1.0  # how often the owner of a run says it is alive
DEAD_AFTER_S = 10.0  # a run whose owner has not beaten for this long is dead


@dataclass
class LiveRun:
    conversation_id: str
    beat_at: float
    watched_at: float

    @property
    def owner_alive(self) -> bool:
        return time.time() - self.beat_at < DEAD_AFTER_S


class SharedRunLog:
    def __init__(self, file: StateFile) -> None:
        self._file = file  # the kit's state file (chats/state.py)
        self._file.now(_forget_dead_owners)

    async def open(self, run_id: str, conversation_id: str) -> None:
        now = time.time()
        await self._file.run(
            lambda c: c.execute(
                "INSERT INTO live_runs VALUES (?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
                "conversation_id = excluded.conversation_id, beat_at = excluded.beat_at, "
                "watched_at = excluded.watched_at",
                (run_id, conversation_id, now, now),
            )
        )

    async def add(self, run_id: str, events: list[tuple[int, str, dict[str, Any]]], *, beat: bool) -> None:
        """New events of a run (possibly none), and with `beat`, a heartbeat, in one transaction."""
        rows = [(run_id, number, name, json.dumps(data, ensure_ascii=False)) for number, name, data in events]

        def write(c: sqlite3.Connection) -> None:
            with write_transaction(c):
                c.executemany("INSERT INTO live_events VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING", rows)
                if beat:
                    c.execute("UPDATE live_runs SET beat_at = ? WHERE run_id = ?", (time.time(), run_id))

        await self._file.run(write)

    async def close(self, run_id: str) -> None:
        await self._file.run(lambda c: _delete(c, run_id))

    async def find(self, run_id: str) -> LiveRun | None:
        row = await self._file.run(
            lambda c: c.execute(
                "SELECT conversation_id, beat_at, watched_at FROM live_runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        )
        return LiveRun(row[0], row[1], row[2]) if row else None

    async def events_after(self, run_id: str, after: int) -> list[tuple[int, str, dict[str, Any]]]:
        rows = await self._file.run(
            lambda c: c.execute(
                "SELECT id, event, data FROM live_events WHERE run_id = ? AND id > ? ORDER BY id", (run_id, after)
            ).fetchall()
        )
        return [(number, name, json.loads(data)) for number, name, data in rows]

    async def touch(self, run_id: str) -> None:
        """A reader in another process is watching: the owner must not cancel the run as abandoned."""
        await self._file.run(
            lambda c: c.execute("UPDATE live_runs SET watched_at = ? WHERE run_id = ?", (time.time(), run_id))
        )


def _forget_dead_owners(c: sqlite3.Connection) -> None:
    dead = c.execute("SELECT run_id FROM live_runs WHERE beat_at < ?", (time.time() - DEAD_AFTER_S,)).fetchall()
    for (run_id,) in dead:
        _delete(c, run_id)


def _delete(c: sqlite3.Connection, run_id: str) -> None:
    with write_transaction(c):
        c.execute("DELETE FROM live_events WHERE run_id = ?", (run_id,))
        c.execute("DELETE FROM live_runs WHERE run_id = ?", (run_id,))
