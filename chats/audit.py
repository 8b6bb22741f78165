"""Who asked what, where, under which policy, what ClickHouse read for it, and how it ended: one audit
entry per question, written where every run ends (`RunRegistry._end` in chats/runs.py, cancelled and
failed runs too), or by the adapter where it refuses a question before any run (`record_refusal`: a rate
limit, a spent budget, a question too long), kept in the kit's state file and read by `agent audit`.

The rows and bytes are what ClickHouse itself said it read for each query (chdb's result, or the
server's `X-ClickHouse-Summary`), carried on the query's result (agent/db/result.py); None when the
engine did not say. A question that reused an earlier query's result read nothing again.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from agent.runner import Outcome, RunResult
from chats.state_file import StateFile, write_transaction
from chats.state_postgres import GroupCalls, PostgresFile

FAILED = "failed"  # the outcome of a run that ended without a result (the runner raised: a bug)
REFUSED = "refused"  # a question refused before it ran: its outcome is "refused: <reason>"


@dataclass(frozen=True)
class Origin:
    """Who asked and where, as the adapter that started the run knows it. An empty `person` is filled
    from the conversation's owner (chats/people.py) when the entry is written."""

    person: str = ""  # an owner string: "person:<person id>" or "slack-channel:<team>:<channel>"
    interface: str = ""
    channel: str = ""  # the Slack channel (or DM) id; "" elsewhere
    policy: str = ""  # the access policy's name; "" leaves it to the run's result (RunResult.policy)


@dataclass(frozen=True)
class AuditQuery:
    label: str  # Q1, Q2, ... as the answer cites it
    sql: str
    rows_read: int | None  # as ClickHouse reported them; None: it did not say
    bytes_read: int | None
    error: str | None = None
    reused_from: str | None = None  # the same SQL ran earlier in the run: nothing was read again


@dataclass(frozen=True)
class AuditEntry:
    run_id: str
    at: float  # when the run ended (Unix seconds)
    person: str
    interface: str
    channel: str
    policy: str
    conversation_id: str
    question: str
    outcome: str  # agent.runner.Outcome's value, FAILED, or "refused: <reason>" (record_refusal)
    queries: tuple[AuditQuery, ...] = field(default_factory=tuple)

    @property
    def rows_read(self) -> int:
        return sum(q.rows_read or 0 for q in self.queries if q.reused_from is None)

    @property
    def bytes_read(self) -> int:
        return sum(q.bytes_read or 0 for q in self.queries if q.reused_from is None)

    def as_json(self) -> dict[str, Any]:
        """One line of `agent audit --json`."""
        return {**asdict(self), "queries": [asdict(q) for q in self.queries]}


def entry_of(
    run_id: str, conversation_id: str, origin: Origin, question: str, result: RunResult | None, at: float
) -> AuditEntry:
    """The entry of a run that ended with `result` (None: it failed before it had one)."""
    queries = tuple(
        AuditQuery(q.id, q.sql, q.result.rows_read, q.result.bytes_read, q.result.error, q.reused_from)
        for q in (result.queries if result is not None else [])
    )
    return AuditEntry(
        run_id=run_id,
        at=at,
        person=origin.person,
        interface=origin.interface,
        channel=origin.channel,
        policy=origin.policy or (result.policy if result is not None and result.policy else ""),
        conversation_id=conversation_id,
        question=question,
        outcome=_outcome(result),
        queries=queries,
    )


def _outcome(result: RunResult | None) -> str:
    if result is None:
        return FAILED
    return Outcome.CANCELLED.value if result.cancelled else result.outcome.value


async def record_refusal(
    audit: AuditLog, origin: Origin, question: str, reason: str, *, conversation_id: str = ""
) -> None:
    """The entry of a question refused before it ran (`reason`: a bounded word such as "rate_limited"). It
    has no run, so it gets an id of its own; it read nothing. `origin.person` should be set: without a
    conversation there is no owner to fill it from."""
    entry = AuditEntry(
        run_id=f"{REFUSED}-{uuid.uuid4().hex}",
        at=audit.clock(),
        person=origin.person,
        interface=origin.interface,
        channel=origin.channel,
        policy=origin.policy,
        conversation_id=conversation_id,
        question=question,
        outcome=f"{REFUSED}: {reason}",
    )
    await audit.record(entry)


@dataclass(frozen=True)
class AuditFilter:
    """Which entries `AuditLog.entries` returns; None matches anything. `person` is an owner string."""

    person: str | None = None
    policy: str | None = None
    interface: str | None = None
    since: float | None = None
    until: float | None = None

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition and its parameters."""
        clauses: list[str] = []
        values: list[Any] = []
        for column, value in (("person", self.person), ("policy", self.policy), ("interface", self.interface)):
            if value is not None:
                clauses.append(f"{column} = ?")
                values.append(value)
        if self.since is not None:
            clauses.append("at >= ?")
            values.append(self.since)
        if self.until is not None:
            clauses.append("at < ?")
            values.append(self.until)
        return (" AND ".join(clauses) or "TRUE"), values


class AuditLog:
    def __init__(self, file: StateFile, *, clock: Callable[[], float] = time.time) -> None:
        self._file = file  # the kit's state file (chats/state.py), which makes the tables
        self.clock = clock
        self._records = GroupCalls.each(file, _insert) if isinstance(file, PostgresFile) else None

    async def record(self, entry: AuditEntry) -> None:
        """Write the entry once (a run's id is written at most once; a second write is ignored)."""
        if self._records is not None:  # PostgreSQL: the entries that come at once go together
            await self._records(entry)
        else:
            await self._file.run(lambda c: _insert(c, entry))

    async def entries(self, which: AuditFilter = AuditFilter(), *, limit: int | None = None) -> list[AuditEntry]:
        """Entries matching `which`, oldest first."""
        return await self._file.run(lambda c: read_entries(c, which, limit))


def _insert(c: sqlite3.Connection, entry: AuditEntry) -> None:
    if not isinstance(c, sqlite3.Connection):  # PostgreSQL: the entry and its queries in one statement
        c.execute(_RECORDED, (*_entry_values(entry), *_query_columns(entry)))
        return
    with write_transaction(c):
        inserted = c.execute(_ENTRY, _entry_values(entry)).rowcount
        if inserted:
            c.executemany(
                "INSERT INTO audit_queries (run_id, position, label, sql, rows_read, bytes_read, error, reused_from) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (entry.run_id, n, q.label, q.sql, q.rows_read, q.bytes_read, q.error, q.reused_from)
                    for n, q in enumerate(entry.queries)
                ],
            )


def _entry_values(entry: AuditEntry) -> tuple[Any, ...]:
    return (
        entry.run_id,
        entry.at,
        entry.person,
        entry.conversation_id,
        entry.interface,
        entry.channel,
        entry.policy,
        entry.conversation_id,
        entry.question,
        entry.outcome,
    )


def _query_columns(entry: AuditEntry) -> tuple[list[Any], ...]:
    queries = entry.queries
    return (
        list(range(len(queries))),
        [q.label for q in queries],
        [q.sql for q in queries],
        [q.rows_read for q in queries],
        [q.bytes_read for q in queries],
        [q.error for q in queries],
        [q.reused_from for q in queries],
    )


# A run's id is written at most once: a second entry, and its queries, are ignored.
_ENTRY = (
    "INSERT INTO audit_entries (run_id, at, person, interface, channel, policy, conversation_id, question, "
    "outcome) VALUES (?, ?, COALESCE(NULLIF(?, ''), (SELECT owner FROM conversations WHERE id = ?), ''), "
    "?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING"
)
# On PostgreSQL one statement, atomic alone (no write lock, one round trip): its queries go in only with the entry.
_RECORDED = f"""WITH entry AS ({_ENTRY} RETURNING run_id)
INSERT INTO audit_queries (run_id, position, label, sql, rows_read, bytes_read, error, reused_from)
SELECT entry.run_id, q.position, q.label, q.sql, q.rows_read, q.bytes_read, q.error, q.reused_from
FROM entry, unnest(CAST(? AS BIGINT[]), CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS BIGINT[]),
    CAST(? AS BIGINT[]), CAST(? AS TEXT[]), CAST(? AS TEXT[]))
    AS q(position, label, sql, rows_read, bytes_read, error, reused_from)"""


def read_entries(c: sqlite3.Connection, which: AuditFilter, limit: int | None = None) -> list[AuditEntry]:
    where, values = which.where()
    rows = c.execute(
        f"SELECT * FROM audit_entries WHERE {where} ORDER BY at, run_id LIMIT ?",
        [*values, 2**63 - 1 if limit is None else limit],  # no limit, on SQLite and PostgreSQL alike
    ).fetchall()
    queries: dict[str, list[AuditQuery]] = {row["run_id"]: [] for row in rows}
    for start in range(0, len(rows), 500):  # SQLite's bound parameters per statement are limited
        ids = [row["run_id"] for row in rows[start : start + 500]]
        for q in c.execute(
            f"SELECT * FROM audit_queries WHERE run_id IN ({','.join('?' * len(ids))}) ORDER BY run_id, position", ids
        ):
            queries[q["run_id"]].append(
                AuditQuery(q["label"], q["sql"], q["rows_read"], q["bytes_read"], q["error"], q["reused_from"])
            )
    return [
        AuditEntry(
            run_id=row["run_id"],
            at=row["at"],
            person=row["person"],
            interface=row["interface"],
            channel=row["channel"],
            policy=row["policy"],
            conversation_id=row["conversation_id"],
            question=row["question"],
            outcome=row["outcome"],
            queries=tuple(queries[row["run_id"]]),
        )
        for row in rows
    ]
