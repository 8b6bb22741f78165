"""Conversations in an embedded SQLite file, shared by every adapter: questions, answers, executed
queries (with a small preview, never whole results), follow-ups, feedback and each run's event log
(so a finished run can be replayed after a restart).

A conversation is found by its id, or by an adapter's key (Slack: team, channel and thread). Event
ids an adapter has handled are kept too, so a redelivered event is answered once, across restarts.

Each conversation belongs to the interface that made it. A lookup given `interface` finds only that
interface's conversations, turns and runs, and answers any other exactly as one that does not exist: the
web, which anyone with its token may call with any id, never reaches a Slack thread through it.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from agent.access.policy import Policies, Policy
from agent.limits import Limits, cut_text, json_size
from agent.receipts import Receipt
from agent.runner import Interface, Outcome, RunResult, Turn, TurnQuery
from chats.run_view import QueryView, RunView
from chats.state_file import StateFile, write_transaction

log = logging.getLogger(__name__)
SHORT_COLUMN_CHARS = 40  # a stored column name past the turn cap: enough to tell columns apart
SHORT_TEXT_CHARS = 200  # a stored question, error or hint past the turn cap
# An earlier turn whose asked-under policy the question now asked does not cover: its question stays (the
# thread reads on), its answer and rows go, since the answer's text can state the very figures.
WITHHELD_ANSWER = "(This answer was read under an access policy this question does not hold; it is not shown.)"

# Whether an earlier turn, by the name of the policy it was asked under, may reach the model now
# (agent/access/policy.py Policies.covers_asked); None: every turn may (no policy file).
MayRead = Callable[[str], bool] | None


def readable_under(policies: Policies | None, reader: Policy | None) -> MayRead:
    """Which stored turns' rows `reader` may be given again: those asked under a policy it covers. None (all
    of them) without a policy file, or with no reader known."""
    return partial(policies.covers_asked, reader) if policies is not None and reader is not None else None


# The SQL of "in `interface`, or any when it is None": a conversation's row is `c`.
_IN_INTERFACE = "(CAST(:interface AS TEXT) IS NULL OR c.interface = :interface)"

# A stored query's id as runs make it: the run's uuid4 hex and the query's Q label.
QUERY_KEY = re.compile(r"[0-9a-f]{32}-Q[1-9][0-9]{0,8}")


def query_key(run_id: str, label: str) -> str:
    """The id of one executed query: its run and its Q label (so the page can build CSV links)."""
    return f"{run_id}-{label}"


class ConversationStore:
    def __init__(self, file: StateFile, limits: Limits | None = None) -> None:
        self._limits = limits or Limits()
        self._file = file  # the kit's state file (chats/state.py), which makes the tables

    @property
    def file(self) -> StateFile:
        """The state file, for the stores kept beside the conversations (the audit log of their runs)."""
        return self._file

    async def create_conversation(
        self, first_question: str, *, key: str | None = None, interface: str = "web", owner: str = ""
    ) -> str:
        """A new conversation belonging to `owner` (chats/people.py); with `key`, the one already kept under
        that key if there is one."""
        conversation_id = uuid.uuid4().hex
        title = " ".join(first_question.split())[:80]
        now = time.time()

        def write(c: sqlite3.Connection) -> str:
            c.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at, interface, adapter_key, owner) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (adapter_key) DO NOTHING",
                (conversation_id, title, now, now, interface, key, owner),
            )
            if key is None:
                return conversation_id
            return str(c.execute("SELECT id FROM conversations WHERE adapter_key = ?", (key,)).fetchone()[0])

        return await self._file.run(write)

    async def find(self, key: str) -> str | None:
        """The conversation kept under an adapter's key."""
        row = await self._file.run(
            lambda c: c.execute("SELECT id FROM conversations WHERE adapter_key = ?", (key,)).fetchone()
        )
        return row["id"] if row else None

    async def claim_event(self, event_key: str, *, keep_s: float = 7 * 24 * 3600) -> bool:
        """True the first time `event_key` is seen (and remembered); False for a redelivery."""
        now = time.time()

        def write(c: sqlite3.Connection) -> bool:
            with write_transaction(c):
                c.execute("DELETE FROM handled_events WHERE seen_at < ?", (now - keep_s,))
                cursor = c.execute(
                    "INSERT INTO handled_events (event_key, seen_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    (event_key, now),
                )
                return cursor.rowcount == 1

        return await self._file.run(write)

    async def record_feedback(self, run_id: str, value: str, *, interface: Interface | None = None) -> bool:
        """The thumb on a stored answer; False when there is none (or, with `interface`, not one of its)."""
        cursor = await self._file.run(
            lambda c: c.execute(
                "UPDATE turns SET feedback = :value WHERE run_id = :run_id AND conversation_id IN "
                f"(SELECT c.id FROM conversations c WHERE {_IN_INTERFACE})",
                {"value": value, "run_id": run_id, "interface": interface},
            )
        )
        return cursor.rowcount > 0

    async def mark_stopped(self, run_id: str) -> bool:
        """A finished answer its reader stopped before it was all shown: stored as cancelled, as it was seen
        (a failed turn stays failed)."""
        cursor = await self._file.run(
            lambda c: c.execute(
                "UPDATE turns SET outcome = ? WHERE run_id = ? AND outcome NOT IN (?, ?)",
                (Outcome.CANCELLED.value, run_id, Outcome.CANCELLED.value, Outcome.ERROR.value),
            )
        )
        return cursor.rowcount > 0

    async def exists(self, conversation_id: str, *, interface: Interface | None = None) -> bool:
        row = await self._file.run(
            lambda c: c.execute(
                f"SELECT 1 FROM conversations c WHERE c.id = :id AND {_IN_INTERFACE}",
                {"id": conversation_id, "interface": interface},
            ).fetchone()
        )
        return row is not None

    async def list_conversations(self, *, owner: str | None = None) -> list[dict[str, Any]]:
        """The web's conversations, newest first; with `owner`, only theirs."""
        rows = await self._file.run(
            lambda c: c.execute(
                "SELECT c.id, c.title, c.created_at, c.updated_at, count(t.run_id) AS turns FROM conversations c "
                "LEFT JOIN turns t ON t.conversation_id = c.id WHERE c.interface = 'web' "
                "AND (CAST(:owner AS TEXT) IS NULL OR c.owner = :owner) GROUP BY c.id ORDER BY c.updated_at DESC",
                {"owner": owner},
            ).fetchall()
        )
        return [dict(row) for row in rows]

    async def owner_of(self, conversation_id: str, *, interface: Interface | None = None) -> str | None:
        """Who the conversation belongs to (chats/people.py); None when there is none (in `interface`)."""
        row = await self._file.run(
            lambda c: c.execute(
                f"SELECT c.owner FROM conversations c WHERE c.id = :id AND {_IN_INTERFACE}",
                {"id": conversation_id, "interface": interface},
            ).fetchone()
        )
        return row["owner"] if row else None

    async def run_owner(self, run_id: str, *, interface: Interface | None = None) -> str | None:
        """Who a stored answer belongs to: its conversation's owner."""
        row = await self._file.run(
            lambda c: c.execute(
                "SELECT c.owner FROM turns t JOIN conversations c ON c.id = t.conversation_id "
                f"WHERE t.run_id = :run_id AND {_IN_INTERFACE}",
                {"run_id": run_id, "interface": interface},
            ).fetchone()
        )
        return row["owner"] if row else None

    async def query_owner(self, key: str) -> str | None:
        """Who a stored query belongs to, whichever interface asked it (a Slack answer links its queries)."""
        row = await self._file.run(
            lambda c: c.execute(
                "SELECT c.owner FROM queries q JOIN turns t ON t.run_id = q.run_id "
                "JOIN conversations c ON c.id = t.conversation_id WHERE q.id = ?",
                (key,),
            ).fetchone()
        )
        return row["owner"] if row else None

    async def get_conversation(
        self, conversation_id: str, *, interface: Interface | None = None
    ) -> dict[str, Any] | None:
        def read(c: sqlite3.Connection) -> dict[str, Any] | None:
            conversation = c.execute(
                f"SELECT * FROM conversations c WHERE c.id = :id AND {_IN_INTERFACE}",
                {"id": conversation_id, "interface": interface},
            ).fetchone()
            if conversation is None:
                return None
            turns = c.execute(
                "SELECT run_id, question, answer, outcome, followups, metrics, created_at, feedback, charts, figures, "
                "receipt, policy FROM turns "
                "WHERE conversation_id = ? ORDER BY position",
                (conversation_id,),
            ).fetchall()
            queries = c.execute(
                "SELECT q.* FROM queries q JOIN turns t ON t.run_id = q.run_id WHERE t.conversation_id = ? "
                "ORDER BY q.rowid",
                (conversation_id,),
            ).fetchall()
            by_run: dict[str, list[dict[str, Any]]] = {}
            for q in queries:
                by_run.setdefault(q["run_id"], []).append(_query_row(q))
            receipts = [Receipt.model_validate_json(t["receipt"]) for t in turns if t["receipt"] != "null"]
            total = Receipt.total(receipts)
            return {
                **dict(conversation),
                "turns": [
                    {
                        **dict(t),
                        "followups": json.loads(t["followups"]),
                        "metrics": json.loads(t["metrics"]),
                        "charts": json.loads(t["charts"]),
                        "figures": json.loads(t["figures"]),
                        "receipt": json.loads(t["receipt"]),
                        "queries": by_run.get(t["run_id"], []),
                    }
                    for t in turns
                ],
                "receipt": total.model_dump() if total else None,  # the conversation's answers summed
            }

        return await self._file.run(read)

    async def delete_conversation(self, conversation_id: str, *, interface: Interface | None = None) -> bool:
        cursor = await self._file.run(
            lambda c: c.execute(
                f"DELETE FROM conversations AS c WHERE c.id = :id AND {_IN_INTERFACE}",
                {"id": conversation_id, "interface": interface},
            )
        )
        return cursor.rowcount > 0

    async def history(self, conversation_id: str, *, may_read: MayRead = None) -> list[Turn]:
        """The conversation's earlier turns for its next question; a turn `may_read` refuses (asked under a
        policy the new question's does not cover) keeps only its question."""

        def read(c: sqlite3.Connection) -> list[Turn]:
            turns = c.execute(
                "SELECT run_id, question, answer, transcript, policy FROM turns WHERE conversation_id = ? "
                "ORDER BY position",
                (conversation_id,),
            ).fetchall()
            return [_history_turn(c, t, may_read) for t in turns]

        return await self._file.run(read)

    async def turns_by_run(self, run_ids: list[str], *, key: str, may_read: MayRead = None) -> dict[str, Turn]:
        """The stored turns of these runs in the conversation an adapter keeps under `key`, as `history`
        gives them (runs not stored there are left out): an adapter that knows its runs by id (Slack reads
        them from its messages' metadata) gets each answer whole, whatever its platform kept of it. A run
        of another conversation is never read, whatever id a message names. A turn `may_read` refuses is
        found with its question alone (never the platform's copy in its place)."""

        def read(c: sqlite3.Connection) -> dict[str, Turn]:
            found: dict[str, Turn] = {}
            for run_id in dict.fromkeys(run_ids):
                row = c.execute(
                    "SELECT t.run_id, t.question, t.answer, t.transcript, t.policy FROM turns t "
                    "JOIN conversations c ON c.id = t.conversation_id WHERE t.run_id = ? AND c.adapter_key = ?",
                    (run_id, key),
                ).fetchone()
                if row is not None:
                    found[run_id] = _history_turn(c, row, may_read)
            return found

        return await self._file.run(read) if run_ids else {}

    async def save_turn(
        self,
        conversation_id: str,
        run_id: str,
        result: RunResult,
        events: list[dict[str, Any]],
        fence: Callable[[sqlite3.Connection], bool] | None = None,
    ) -> bool:
        """Write the whole turn in one transaction, within the turn's byte cap. `fence`, run first in that
        transaction, says whether this host may store it (a durable run's: it still holds the run, and forgets
        it there): False, and nothing is written."""
        turn = _StoredTurn.of(result, events, self._limits.preview_bytes)
        turn.fit(self._limits.max_turn_bytes)

        def write(c: sqlite3.Connection) -> bool:
            now = time.time()
            with write_transaction(c):
                if fence is not None and not fence(c):
                    return False
                row = _turn_row(run_id, conversation_id, result, turn, now)
                queries = [_stored_query(run_id, q) for q in turn.queries]
                if not isinstance(c, sqlite3.Connection):  # PostgreSQL: one statement, one round trip
                    columns = [[query[i] for query in queries] for i in range(_QUERY_COLUMNS)]
                    c.execute(_STORED, (*row, *columns, now, conversation_id))
                    return True
                position = c.execute(
                    "SELECT count(*) FROM turns WHERE conversation_id = ?", (conversation_id,)
                ).fetchone()[0]
                placed = (*row[:2], position, *row[3:])
                c.execute(f"INSERT INTO turns ({_TURN_COLUMNS}) VALUES (?, ?, ?, {_TURN_MARKS})", placed)
                for query in queries:
                    c.execute("INSERT INTO queries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", query)
                c.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id))
                return True

        return bool(await self._file.run(write))

    async def get_query(self, key: str) -> dict[str, Any] | None:
        """One executed query as the conversation view shows it, with the question its run answered and
        when the answer was stored (a page of its own, which Slack's answers link to)."""

        def read(c: sqlite3.Connection) -> dict[str, Any] | None:
            row = c.execute(
                "SELECT q.*, t.question AS asked, t.created_at AS answered_at FROM queries q "
                "JOIN turns t ON t.run_id = q.run_id WHERE q.id = ?",
                (key,),
            ).fetchone()
            if row is None:
                return None
            answered = {"asked": row["asked"], "answered_at": row["answered_at"]}
            return {**_query_row(row), "run_id": row["run_id"], **answered}

        return await self._file.run(read)

    async def query_sql(self, key: str) -> str | None:
        row = await self._file.run(lambda c: c.execute("SELECT sql FROM queries WHERE id = ?", (key,)).fetchone())
        return (row["sql"] or None) if row else None  # empty: given up to keep the turn within its cap

    async def query_policy(self, key: str) -> str | None:
        """The name of the access policy the query was asked under ('' when none was recorded); None when
        there is no such query."""
        row = await self._file.run(
            lambda c: c.execute(
                "SELECT t.policy FROM queries q JOIN turns t ON t.run_id = q.run_id WHERE q.id = ?", (key,)
            ).fetchone()
        )
        return str(row["policy"]) if row else None

    async def run_policy(self, run_id: str) -> str | None:
        """The name of the access policy the run was asked under ('' when none was recorded); None when
        no such run is stored."""
        row = await self._file.run(
            lambda c: c.execute("SELECT policy FROM turns WHERE run_id = ?", (run_id,)).fetchone()
        )
        return str(row["policy"]) if row else None

    async def run_receipt(self, run_id: str) -> Receipt | None:
        """What the stored run spent (None: nothing recorded, or no such run)."""
        row = await self._file.run(
            lambda c: c.execute("SELECT receipt FROM turns WHERE run_id = ?", (run_id,)).fetchone()
        )
        return Receipt.model_validate_json(row["receipt"]) if row and row["receipt"] != "null" else None

    async def run_events(
        self, run_id: str, *, interface: Interface | None = None
    ) -> tuple[str, list[dict[str, Any]]] | None:
        row = await self._file.run(
            lambda c: c.execute(
                "SELECT t.conversation_id, t.events FROM turns t JOIN conversations c ON c.id = t.conversation_id "
                f"WHERE t.run_id = :run_id AND {_IN_INTERFACE}",
                {"run_id": run_id, "interface": interface},
            ).fetchone()
        )
        return (row["conversation_id"], json.loads(row["events"])) if row else None


@dataclass
class _StoredTurn:
    """The parts of a turn whose size the run's output decides, and what gives way, in order, when
    together they pass the cap: rows in the replayed event log (the conversation view keeps its
    previews), the transcript (the next question then carries the turn in compact form), the charts'
    data in the event log, the previews, the charts, column names and SQL in the event log (the query
    rows keep them), column names past a short cut, and last the queries' SQL (their downloads are then
    gone). Every part counts, the query rows too."""

    events: list[dict[str, Any]]
    transcript: list[dict[str, Any]]
    charts: list[dict[str, Any]]
    queries: list[QueryView]  # each query row is the run's view of it, its preview within `preview_bytes`

    @classmethod
    def of(cls, result: RunResult, events: list[dict[str, Any]], preview_bytes: int) -> _StoredTurn:
        return cls(
            events=events,
            transcript=result.transcript,
            charts=[chart.summary() for chart in result.charts],
            queries=list(RunView.of_result(result, max_bytes=preview_bytes).queries.values()),
        )

    def size(self) -> int:
        stored = [[q.question, q.sql, q.columns, q.rows, q.error, q.hint] for q in self.queries]  # its row's texts
        return json_size([self.events, self.transcript, self.charts, stored])

    def fit(self, max_bytes: int) -> None:
        steps = (
            self._drop_event_rows,
            self._drop_transcript,
            self._drop_event_charts,
            self._drop_previews,
            self._drop_charts,
            self._drop_event_columns_and_sql,
            self._shorten_query_columns,
            self._cut_query_texts,
            self._drop_query_sql,
            self._drop_events,
        )
        for step in steps:
            if self.size() <= max_bytes:
                return
            step()
        if self.size() > max_bytes:  # only ids and counts are left: say so rather than pass silently
            log.warning("a stored turn is %d bytes, over its cap of %d, with everything cut", self.size(), max_bytes)

    def _drop_event_rows(self) -> None:
        self.events = [_without(e, "rows", []) if e["event"] == "result" else e for e in self.events]

    def _drop_transcript(self) -> None:
        self.transcript = []

    def _drop_event_charts(self) -> None:
        self.events = [e for e in self.events if e["event"] != "chart"]

    def _drop_previews(self) -> None:
        for query in self.queries:
            query.rows = []

    def _drop_charts(self) -> None:
        self.charts = []

    def _drop_event_columns_and_sql(self) -> None:
        self.events = [
            {**e, "data": {**e["data"], **({"columns": []} if "columns" in e["data"] else {}), "sql": ""}}
            if e["event"] in ("executing", "result")
            else e
            for e in self.events
        ]

    def _shorten_query_columns(self) -> None:
        for query in self.queries:
            query.columns = [cut_text(name, SHORT_COLUMN_CHARS) for name in query.columns]

    def _cut_query_texts(self) -> None:
        for query in self.queries:
            query.question = cut_text(query.question, SHORT_TEXT_CHARS)
            query.error = cut_text(query.error, SHORT_TEXT_CHARS) if query.error else query.error
            query.hint = cut_text(query.hint, SHORT_TEXT_CHARS) if query.hint else query.hint

    def _drop_query_sql(self) -> None:
        for query in self.queries:
            query.sql = ""

    def _drop_events(self) -> None:
        """The replayed log goes last: the conversation view is built from the turn and its queries."""
        self.events = []


def _history_turn(c: sqlite3.Connection, turn: sqlite3.Row, may_read: MayRead) -> Turn:
    if may_read is not None and not may_read(turn["policy"] or ""):
        return Turn(question=turn["question"], answer=WITHHELD_ANSWER)
    queries = c.execute(
        "SELECT label, question, sql, columns, preview, row_count, error FROM queries WHERE run_id = ? ORDER BY rowid",
        (turn["run_id"],),
    ).fetchall()
    return Turn(
        question=turn["question"],
        answer=turn["answer"],
        transcript=json.loads(turn["transcript"]),
        queries=[
            TurnQuery(
                id=q["label"],
                question=q["question"],
                sql=q["sql"],
                columns=json.loads(q["columns"]),
                rows=json.loads(q["preview"])[:5],
                row_count=q["row_count"],
                error=q["error"],
            )
            for q in queries
        ],
    )


def _without(event: dict[str, Any], key: str, empty: Any) -> dict[str, Any]:
    return {**event, "data": {**event["data"], key: empty}}


def _turn_row(run_id: str, conversation_id: str, result: RunResult, turn: _StoredTurn, now: float) -> tuple[Any, ...]:
    """A turn's row, its position (the third value) to be filled in: the conversation's count of turns."""
    return (
        run_id,
        conversation_id,
        conversation_id,
        result.question,
        result.answer,
        result.outcome.value,
        _dumps(result.followups),
        result.metrics.model_dump_json(),
        _dumps(turn.transcript),
        _dumps(turn.events),
        now,
        _dumps(turn.charts),
        result.figures.model_dump_json() if result.figures else "null",
        result.receipt.model_dump_json() if result.receipt else "null",
        result.policy or "",
        result.classification.value,  # a clarification left unanswered is reviewed
    )


def _stored_query(run_id: str, q: QueryView) -> tuple[Any, ...]:
    return (
        query_key(run_id, q.query_id),
        run_id,
        q.query_id,
        q.question,
        q.sql,
        _dumps(q.columns),
        _dumps(q.rows),
        q.row_count,
        int(q.has_more),
        q.error,
        q.hint,
        q.elapsed_ms,
    )


_TURN_COLUMNS = (
    "run_id, conversation_id, position, question, answer, outcome, followups, metrics, transcript, events, "
    "created_at, charts, figures, receipt, policy, classification"
)
_TURN_MARKS = ", ".join("?" * 13)
_QUERY_COLUMNS = 12
# A turn's store on PostgreSQL in one statement (under the write lock its transaction holds): the turn at the
# conversation's next position, its queries (checked against the turn at the statement's end), and the
# conversation's time.
_STORED = f"""WITH turn AS (
    INSERT INTO turns ({_TURN_COLUMNS})
    VALUES (?, ?, (SELECT count(*) FROM turns WHERE conversation_id = ?), {_TURN_MARKS}) RETURNING run_id
), asked AS (
    INSERT INTO queries (id, run_id, label, question, sql, columns, preview, row_count, has_more, error, hint,
        elapsed_ms)
    SELECT q.id, q.run_id, q.label, q.question, q.sql, q.columns, q.preview, q.row_count, q.has_more, q.error,
        q.hint, q.elapsed_ms
    FROM turn, unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS TEXT[]),
        CAST(? AS TEXT[]), CAST(? AS TEXT[]), CAST(? AS BIGINT[]), CAST(? AS BIGINT[]), CAST(? AS TEXT[]),
        CAST(? AS TEXT[]), CAST(? AS BIGINT[]))
        AS q(id, run_id, label, question, sql, columns, preview, row_count, has_more, error, hint, elapsed_ms)
)
UPDATE conversations SET updated_at = ? WHERE id = ?"""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _query_row(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "label": row["label"],
        "query_id": row["label"],  # as the run's events name it (the web reads both alike)
        "question": row["question"],
        "sql": row["sql"],
        "columns": json.loads(row["columns"]),
        "rows": json.loads(row["preview"]),
        "row_count": row["row_count"],
        "has_more": bool(row["has_more"]),
        "error": row["error"],
        "hint": row["hint"],
        "elapsed_ms": row["elapsed_ms"],
    }
