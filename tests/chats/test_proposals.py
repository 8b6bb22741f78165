"""What thumbs propose, on SQLite and on PostgreSQL: a thumbed answer waits with its reason and the queries
that ran (in the order they ran, failed ones left out) until a reviewer decides."""

from __future__ import annotations

import time
from pathlib import Path

from agent.db.result import QueryResult
from agent.figures.report import FigureCheck, FigureReport
from agent.runner import Classification, ExecutedQuery, Outcome, RunResult
from chats.proposals import UNANSWERED_AFTER_S
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
        assert (waiting.run_id, waiting.kind, waiting.reason) == ("run1", "down", "wrong year")
        assert [(q.label, q.sql, q.rows, q.row_count) for q in waiting.queries] == [
            ("Q2", "SELECT 2", [[1]], 1),
            ("Q1", "SELECT 1", [[1]], 1),  # typed as the result was
        ]
        await proposals.decide("run1", "rejected")
        assert await proposals.pending() == []
    finally:
        state.close()


async def test_answers_that_went_wrong_without_a_thumb_are_gathered_once(state_location: Path | str) -> None:
    """Figures left unverified, a failed run and a clarification still unanswered an hour on are proposed
    (each once, until decided); a sound answer, an answered clarification and a fresh one are not."""
    state = ChatState(state_location)
    conversations, proposals = state.conversations, state.proposals
    unverified = FigureReport(figures=[FigureCheck(text="7", start=0, end=1, verified=False)])
    verified = FigureReport(figures=[FigureCheck(text="16", start=0, end=2, verified=True)])
    turns = {
        "sound": RunResult(question="airlines?", answer="16 [Q1]", figures=verified),
        "unverified": RunResult(question="delay?", answer="7 minutes", figures=unverified),
        "failed": RunResult(question="broken?", outcome=Outcome.ERROR, error="the model was unreachable"),
        "asked": RunResult(question="which delay?", classification=Classification.CLARIFICATION, answer="Which?"),
    }
    try:
        for run_id, result in turns.items():
            await conversations.save_turn(await conversations.create_conversation(result.question), run_id, result, [])
        answered = await conversations.create_conversation("and the delay?")
        clarified = RunResult(question="and the delay?", classification=Classification.CLARIFICATION, answer="Which?")
        await conversations.save_turn(answered, "asked-then-answered", clarified, [])
        await conversations.save_turn(answered, "the-answer", RunResult(question="arrival", answer="6.9"), [])
        now = time.time()
        soon = [(p.run_id, p.kind) for p in await proposals.pending(now=now)]
        assert sorted(soon) == [("failed", "failed"), ("unverified", "unverified")], "a fresh question may be answered"
        later = [(p.run_id, p.kind) for p in await proposals.pending(now=now + UNANSWERED_AFTER_S + 1)]
        assert sorted(later) == [("asked", "unanswered"), ("failed", "failed"), ("unverified", "unverified")]
        await proposals.decide("unverified", "approved")
        assert "unverified" not in {p.run_id for p in await proposals.pending(now=now)}
    finally:
        state.close()
