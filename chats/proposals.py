"""What people's thumbs propose, waiting for a person: a thumbs-up proposes the answer's queries as
verified queries for the team's knowledge, a thumbs-down (with its optional reason) an eval case.

The thumbs themselves are stored with the turn (`ConversationStore.record_feedback`); this keeps, in
the same SQLite file, a thumbs-down's reason and what the reviewer decided, so `agent knowledge
review` shows each proposal once."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from chats.state_file import StateFile, write_transaction

MAX_REASON_CHARS = 1_000
Decision = Literal["approved", "rejected"]
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
    feedback: Literal["up", "down"]
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

    async def pending(self) -> list[Proposal]:
        """Every turn with a thumb that nobody has decided on yet, oldest first."""

        def read(c: sqlite3.Connection) -> list[Proposal]:
            turns = c.execute(
                "SELECT t.run_id, t.feedback, t.question, t.answer, t.created_at, r.reason FROM turns t "
                "LEFT JOIN feedback_reviews r ON r.run_id = t.run_id "
                "WHERE t.feedback IN ('up', 'down') AND r.decision IS NULL ORDER BY t.created_at, t.run_id"
            ).fetchall()
            proposals = []
            for t in turns:
                queries = c.execute(
                    "SELECT label, question, sql, columns, preview, row_count FROM queries "
                    "WHERE run_id = ? AND error IS NULL AND sql != '' ORDER BY rowid",
                    (t["run_id"],),
                ).fetchall()
                proposals.append(
                    Proposal(
                        run_id=t["run_id"],
                        feedback=t["feedback"],
                        question=t["question"],
                        answer=t["answer"],
                        created_at=t["created_at"],
                        reason=t["reason"],
                        queries=[
                            ProposedQuery(
                                q["label"],
                                q["question"],
                                q["sql"],
                                json.loads(q["columns"]),
                                json.loads(q["preview"]),
                                q["row_count"],
                            )
                            for q in queries
                        ],
                    )
                )
            return proposals

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
