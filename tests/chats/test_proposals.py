"""What thumbs propose, on SQLite and on PostgreSQL: a thumbed answer waits with its reason and the queries
that ran (in the order they ran, failed ones left out) until a reviewer decides."""

from __future__ import annotations

from pathlib import Path

from agent.db.result import QueryResult
from agent.runner import ExecutedQuery, RunResult
from chats.state import ChatState


def _query(label: str, sql: str, *, error: str | None = None) -> ExecutedQuery:
    result = QueryResult(query_id=label, sql=sql, columns=["n"], types=["UInt8"], rows=[["1"]], error=error)
    return ExecutedQuery(id=label, question=f"{label}?", sql=sql, result=result)


async def test_a_thumbed_answer_waits_with_its_reason_and_queries_until_decided(state_location: Path | str) -> None:
    state = ChatState(state_location)
    try:
        conversations, proposals = state.conversations, state.proposals
        conversation = await conversations.create_conversation("busiest airport?")
        queries = [_query("Q2", "SELECT 2"), _query("Q1", "SELECT 1"), _query("Q3", "SELEC", error="syntax")]
        result = RunResult(question="busiest airport?", answer="EWR [Q1]", queries=queries)
        await conversations.save_turn(conversation, "run1", result, [])
        assert await proposals.pending() == []
        assert await conversations.record_feedback("run1", "down")
        await proposals.note_reason("run1", "  wrong\nairport ")
        await proposals.note_reason("run1", "wrong   year")  # the latest reason counts
        (waiting,) = await proposals.pending()
        assert (waiting.run_id, waiting.feedback, waiting.reason) == ("run1", "down", "wrong year")
        assert [(q.label, q.sql, q.rows, q.row_count) for q in waiting.queries] == [
            ("Q2", "SELECT 2", [[1]], 1),
            ("Q1", "SELECT 1", [[1]], 1),  # typed as the result was
        ]
        await proposals.decide("run1", "rejected")
        assert await proposals.pending() == []
    finally:
        state.close()
