"""What asks for a reviewer, gathered from the answers people got, so wrong answers become eval cases
without anyone going to look for them: a thumbs-up proposes the answer's queries as verified queries for
the team's knowledge; a thumbs-down (with its optional reason), an answer whose figures stayed unverified
after the correction round, a clarification nobody answered within the hour, and a run that failed each
propose an eval case.

The thumbs themselves are stored with the turn (`ConversationStore.record_feedback`); this keeps, in
the same state, a thumbs-down's reason and what the reviewer decided on each, so `agent knowledge review`
shows each proposal once."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

from chats.state_file import StateFile, write_transaction

MAX_REASON_CHARS = 1_000
UNANSWERED_AFTER_S = 3600.0  # a clarification still without a next message this long after is unanswered
Decision = Literal["approved", "rejected"]
# Why a turn is proposed: its thumb, or what went wrong with it that nobody said.
Kind = Literal["up", "down", "unverified", "unanswered", "failed"]
T = TypeVar("T")


@dataclass(frozen=True)
class ProposedQuery:
    label: str  # Q1, Q2, ...
    question: str  # the data question the model gave it
    sql: str
    columns: list[str]
    rows: list[list[Any]]  # the preview the person saw
    row_count: int


@dataclass(frozen=True)
class Proposal:
    run_id: str
    kind: Kind
    question: str
    answer: str
    created_at: float
    reason: str | None = None
    queries: list[ProposedQuery] = field(default_factory=list)  # those that ran without error


class ProposalStore:
    def __init__(self, file: StateFile) -> None:
        self._file = file  # the kit's state file (chats/state.py)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._file.run(fn)

    async def note_reason(self, run_id: str, reason: str) -> None:
        """A thumbs-down's reason, kept for the eval case it proposes."""
        text = " ".join(reason.split())[:MAX_REASON_CHARS]

        def write(c: sqlite3.Connection) -> None:
            c.execute(
                "INSERT INTO feedback_reviews (run_id, reason) VALUES (?, ?) "
                "ON CONFLICT (run_id) DO UPDATE SET reason = excluded.reason",
                (run_id, text or None),
            )

        await self._run(write)

    async def pending(self, now: float | None = None) -> list[Proposal]:
        """Every turn that asks for a reviewer and has no decision yet, oldest first: thumbed, with figures
        left unverified, a clarification unanswered for UNANSWERED_AFTER_S before `now`, or failed."""
        before = (time.time() if now is None else now) - UNANSWERED_AFTER_S

        def read(c: sqlite3.Connection) -> list[Proposal]:
            turns = c.execute(_PENDING, (*_UNVERIFIED, before)).fetchall()
            return [_proposal(t, _queries(c, t["run_id"])) for t in turns if _kind(t) is not None]

        return await self._run(read)

    async def decide(self, run_id: str, decision: Decision) -> None:
        def write(c: sqlite3.Connection) -> None:
            with write_transaction(c):
                c.execute(
                    "INSERT INTO feedback_reviews (run_id, decision, decided_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (run_id) DO UPDATE SET decision = excluded.decision, decided_at = excluded.decided_at",
                    (run_id, decision, time.time()),
                )

        await self._run(write)


# A turn with a thumb, an error, figures left unverified (the report as stored: `"unverified":N` last), or a
# clarification that is its conversation's last turn. The patterns are parameters: on PostgreSQL a `%` in
# quoted SQL would read as a placeholder.
_PENDING = (
    "SELECT t.run_id, t.feedback, t.question, t.answer, t.created_at, t.outcome, t.classification, t.figures, "
    "r.reason FROM turns t LEFT JOIN feedback_reviews r ON r.run_id = t.run_id WHERE r.decision IS NULL AND ("
    "t.feedback IN ('up', 'down') OR t.outcome = 'error' "
    "OR (t.figures LIKE ? AND t.figures NOT LIKE ? AND t.figures NOT LIKE ?) "
    "OR (t.classification = 'clarification' AND t.created_at < ? AND NOT EXISTS "
    "(SELECT 1 FROM turns n WHERE n.conversation_id = t.conversation_id AND n.position > t.position))"
    ") ORDER BY t.created_at, t.run_id"
)
_UNVERIFIED = ('%"unverified":%', '%"unverified":0,%', '%"unverified":0}%')


def _kind(turn: Any) -> Kind | None:
    """Why the turn is proposed: a thumb says it; then a failure, figures unverified, a question unanswered."""
    if turn["feedback"] in ("up", "down"):
        return cast(Kind, turn["feedback"])
    if turn["outcome"] == "error":
        return "failed"
    figures = json.loads(turn["figures"] or "null")
    if isinstance(figures, dict) and int(figures.get("unverified") or 0) > 0:
        return "unverified"
    return "unanswered" if turn["classification"] == "clarification" else None


def _queries(c: sqlite3.Connection, run_id: str) -> list[ProposedQuery]:
    rows = c.execute(
        "SELECT label, question, sql, columns, preview, row_count FROM queries "
        "WHERE run_id = ? AND error IS NULL AND sql != '' ORDER BY rowid",
        (run_id,),
    ).fetchall()
    return [
        ProposedQuery(
            q["label"], q["question"], q["sql"], json.loads(q["columns"]), json.loads(q["preview"]), q["row_count"]
        )
        for q in rows
    ]


def _proposal(turn: Any, queries: list[ProposedQuery]) -> Proposal:
    kind = _kind(turn)
    assert kind is not None
    return Proposal(
        run_id=turn["run_id"],
        kind=kind,
        question=turn["question"],
        answer=turn["answer"],
        created_at=turn["created_at"],
        reason=turn["reason"],
        queries=queries,
    )
