"""The shared run log's statements on PostgreSQL (chats/shared_runs.py), each made for many runs at once.

A host answering a hundred chats copies a hundred runs' events, beats for them, opens and closes them; its
readers of other hosts' runs read as many logs. One statement and one round trip each would keep the host's
threads and the server busy for what SQLite does in process: here every kind is a group call
(chats/state_postgres.py `GroupCalls`), one statement per group over arrays of the runs' values, so the
statement's text never changes (PostgreSQL prepares it once) and a busy host makes one round trip where it
made a hundred. Each statement notifies the runs it wrote, as the single-run one did, and is atomic alone:
only a run's owner writes its rows, so none takes the kit's write lock (a copy's and a close's fence locks
the durable rows it reads instead, so a takeover's claim is never overtaken).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from chats.state_postgres import POSTGRES_NOW, GroupCalls, PostgresFile

EventRow = tuple[str, int, str, str]  # run id, number, name, data as JSON
PAYLOAD_MAX_BYTES = 8000  # PostgreSQL's limit on a notice's payload: a copy's events past it are read instead


@dataclass(frozen=True)
class Copy:
    """A run's new events (possibly none) and, with `beat_at`, its heartbeat (stamped by the database's clock:
    `beat_at` only says there is one); with `holder`, none of it once another host holds the run
    (chats/durable.py)."""

    run_id: str
    rows: list[EventRow]
    beat_at: float | None
    holder: str | None


@dataclass(frozen=True)
class Opening:
    run_id: str
    conversation_id: str
    at: float
    policy: str


class GroupedLog:
    """The shared log's writes and reads of one process, each kind made in groups."""

    def __init__(self, file: PostgresFile, channel: str) -> None:
        self.channel = channel
        self.opens = GroupCalls(file, self._open)
        self.copies = GroupCalls(file, self._copy)
        self.reads = GroupCalls(file, _read)
        self.closes = GroupCalls(file, self._close)
        self.touches = GroupCalls(file, self._touch)

    def _open(self, c: sqlite3.Connection, items: list[Opening]) -> list[None]:
        columns = [[getattr(item, name) for item in items] for name in ("run_id", "conversation_id", "at", "policy")]
        c.execute(_OPEN, [*columns, self.channel])
        return [None] * len(items)

    def _copy(self, c: sqlite3.Connection, items: list[Copy]) -> list[tuple[bool, float | None]]:
        """Each run's copy: whether it was written (not fenced out) and, with a beat, the run's `watched_at`."""
        rows = [row for item in items for row in item.rows]
        params = [
            [item.run_id for item in items],
            [item.holder for item in items],
            [item.beat_at for item in items],
            *([row[i] for row in rows] for i in range(4)),
            self.channel,
        ]
        found = c.execute(_COPY, params).fetchall()
        return [(not fenced, float(watched) if watched is not None else None) for _, watched, fenced, _ in found]

    def _close(self, c: sqlite3.Connection, items: list[tuple[str, str | None]]) -> list[None]:
        c.execute(_CLOSE, [[run for run, _ in items], [holder for _, holder in items], self.channel])
        return [None] * len(items)

    def _touch(self, c: sqlite3.Connection, items: list[tuple[str, float, str]]) -> list[tuple[Any, ...] | None]:
        """Each (run, at, notice)'s reader heartbeat, the owner told by `notice`; the run's row as `find` reads
        it (with the database's clock), or None where there is none."""
        columns = [[item[i] for item in items] for i in range(3)]
        return [None if row[1] is None else tuple(row[1:6]) for row in c.execute(_TOUCH, [*columns, self.channel])]


def _read(c: sqlite3.Connection, items: list[tuple[str, int]]) -> list[list[tuple[int, str, str]]]:
    """Each (run, after)'s events after `after`, in order."""
    found: list[list[tuple[int, str, str]]] = [[] for _ in items]
    for n, number, name, data in c.execute(_READ, [[run for run, _ in items], [after for _, after in items]]):
        found[n - 1].append((number, name, data))
    return found


# Beats are stamped by the database's clock, as they are judged (chats/shared_runs.py): the hosts' clocks differ.
_OPEN = f"""WITH opened AS (
    INSERT INTO live_runs (run_id, conversation_id, beat_at, watched_at, policy)
    SELECT r.run_id, r.conversation_id, {POSTGRES_NOW}, r.at, r.policy
    FROM unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS DOUBLE PRECISION[]), CAST(? AS TEXT[]))
        AS r(run_id, conversation_id, at, policy)
    ON CONFLICT (run_id) DO UPDATE SET conversation_id = excluded.conversation_id, beat_at = excluded.beat_at,
        watched_at = excluded.watched_at, policy = excluded.policy
    RETURNING run_id
) SELECT pg_notify(?, run_id) FROM opened"""

# The fence (a durable run another host holds: its holder is not the writer) is read in the same statement as
# the writes it keeps out, and its durable rows are locked (FOR SHARE, before any write): a claim committed
# before the lock is seen (READ COMMITTED re-reads a locked row's newest version), and one after it waits for
# the copy's commit, so a copy stalled on the server never lands past a takeover. A durable run with neither a
# durable row nor a live_runs row is over (another host finished and closed it): fenced too. Events go only into
# a run whose live_runs row is still there once it is locked (`live`): a run closed while its copy waited on the
# server gets no orphan events (one not yet opened, as at a run's very start, gets its events as before). A copy
# without a beat locks that row FOR KEY SHARE rather than updating it: as a close's DELETE waits for it, but no
# new row version a copy (no dead rows for the vacuum), and no wait behind a reader's heartbeat on the row. A beat
# alone is no news for the readers: only runs with events are notified, and each notice carries the events this
# copy added (not one already there), in order, when they fit in the payload: the readers need not read them.
# Built here from what was inserted, a notice says exactly what the table has; too large, it is the run's id alone.
_COPY = f"""WITH batch AS (
    SELECT * FROM unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS DOUBLE PRECISION[]))
        WITH ORDINALITY AS b(run_id, holder, beat_at, n)
), held AS (
    SELECT d.run_id, d.holder FROM durable_runs d WHERE d.run_id IN (SELECT run_id FROM batch WHERE holder IS NOT NULL)
    FOR SHARE OF d
), seen AS (
    SELECT l.run_id FROM live_runs l WHERE l.run_id IN (SELECT run_id FROM batch)
), fenced AS (
    SELECT DISTINCT b.run_id FROM batch b LEFT JOIN held d ON d.run_id = b.run_id
    WHERE d.holder <> b.holder
        OR (b.holder IS NOT NULL AND d.run_id IS NULL AND b.run_id NOT IN (SELECT run_id FROM seen))
), beaten AS (
    UPDATE live_runs l SET beat_at = {POSTGRES_NOW}
    FROM batch b WHERE l.run_id = b.run_id AND b.beat_at IS NOT NULL AND b.run_id NOT IN (SELECT run_id FROM fenced)
    RETURNING l.run_id, l.watched_at
), kept AS (
    SELECT l.run_id FROM live_runs l
    WHERE l.run_id IN (SELECT run_id FROM batch WHERE beat_at IS NULL) AND l.run_id NOT IN (SELECT run_id FROM fenced)
    FOR KEY SHARE OF l
), live AS (
    SELECT run_id, watched_at FROM beaten UNION ALL SELECT run_id, NULL FROM kept
), events AS (
    SELECT * FROM unnest(CAST(? AS TEXT[]), CAST(? AS BIGINT[]), CAST(? AS TEXT[]), CAST(? AS TEXT[]))
        AS e(run_id, id, event, data)
    WHERE e.run_id NOT IN (SELECT run_id FROM fenced)
        AND (e.run_id IN (SELECT run_id FROM live) OR e.run_id NOT IN (SELECT run_id FROM seen))
), added AS (
    INSERT INTO live_events (run_id, id, event, data) SELECT run_id, id, event, data FROM events
    ON CONFLICT DO NOTHING
    RETURNING run_id, id, event, data
), news AS (
    SELECT run_id,
        run_id || E'\n[' || string_agg('[' || id || ',' || to_json(event) || ',' || data || ']', ',' ORDER BY id) || ']'
        AS payload
    FROM added GROUP BY run_id
), told AS (
    SELECT pg_notify(?, CASE WHEN octet_length(payload) < {PAYLOAD_MAX_BYTES} THEN payload ELSE run_id END) FROM news
)
SELECT b.n, (SELECT max(watched_at) FROM beaten WHERE beaten.run_id = b.run_id),
    b.run_id IN (SELECT run_id FROM fenced), (SELECT count(*) FROM told)
FROM batch b ORDER BY b.n"""

# A close is fenced as a copy is: a host that froze past its lease never takes the taker's run out of the log.
_CLOSE = """WITH batch AS (
    SELECT * FROM unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[])) AS b(run_id, holder)
), held AS (
    SELECT d.run_id, d.holder FROM durable_runs d WHERE d.run_id IN (SELECT run_id FROM batch WHERE holder IS NOT NULL)
    FOR SHARE OF d
), runs AS (
    SELECT DISTINCT b.run_id FROM batch b
    WHERE NOT EXISTS (SELECT 1 FROM held d WHERE d.run_id = b.run_id AND d.holder <> b.holder)
),
gone AS (DELETE FROM live_events WHERE run_id IN (SELECT run_id FROM runs)),
ended AS (DELETE FROM live_runs WHERE run_id IN (SELECT run_id FROM runs))
SELECT pg_notify(?, run_id) FROM runs"""

# A reader's heartbeat tells the run's owner that it is followed, and reads the run's row back: one round trip
# for the check a quiet reader makes on the owner now and then (chats/runs.py).
_TOUCH = f"""WITH batch AS (
    SELECT * FROM unnest(CAST(? AS TEXT[]), CAST(? AS DOUBLE PRECISION[]), CAST(? AS TEXT[]))
        WITH ORDINALITY AS b(run_id, at, notice, n)
), touched AS (
    UPDATE live_runs l SET watched_at = b.at FROM batch b WHERE l.run_id = b.run_id
    RETURNING l.run_id, l.conversation_id, l.beat_at, l.watched_at, l.policy
), told AS (
    SELECT pg_notify(?, b.notice) FROM batch b WHERE b.run_id IN (SELECT run_id FROM touched)
)
SELECT b.n, t.conversation_id, t.beat_at, t.watched_at, t.policy, {POSTGRES_NOW}, (SELECT count(*) FROM told)
FROM batch b LEFT JOIN touched t ON t.run_id = b.run_id ORDER BY b.n"""

_READ = """SELECT r.n, e.id, e.event, e.data
FROM unnest(CAST(? AS TEXT[]), CAST(? AS BIGINT[])) WITH ORDINALITY AS r(run_id, after, n)
JOIN live_events e ON e.run_id = r.run_id AND e.id > r.after
ORDER BY r.n, e.id"""
