"""Retention: past AGENT_RETENTION_DAYS, what people asked is deleted from every table of the state file,
on a clock the test moves; what is younger stays whole."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from agent.db.result import QueryResult
from agent.runner import Checkpoint, ExecutedQuery, RunResult
from chats.durable import DurableRun, DurableRuns
from chats.people import Person
from chats.retention import DAY_S, SWEEPS, TABLES, Retention
from chats.runs import RunRegistry
from chats.state import ChatState
from tests.chats.test_runs_done import ScriptedRunner


class QueryingRunner(ScriptedRunner):
    """Answers with one query that ran, so the answer keeps a query row and its audit entry a query."""

    async def run(self, question: str, **_: object) -> RunResult:  # type: ignore[override]
        result = QueryResult(query_id="x", sql="SELECT 1", columns=["1"], types=["UInt8"], rows=[["1"]], rows_read=1)
        return RunResult(
            question=question,
            answer="1 [Q1]",
            queries=[ExecutedQuery(id="Q1", question=question, sql="SELECT 1", result=result)],
        )


@pytest.fixture
def state(state_location: Path | str):
    state = ChatState(state_location, workers=2)  # two workers: the shared run log is kept too
    yield state
    state.close()


async def _answered(state: ChatState, question: str) -> tuple[str, str]:
    """A conversation with one stored answer (its turn, event log and audit entry), thumbed down with a reason."""
    runs = RunRegistry(QueryingRunner(), state.conversations)
    conversation = await state.conversations.create_conversation(question, owner="person:email:ann@example.com")
    handle = runs.start(conversation, question, [], platform="web", interface="web")
    assert handle.task is not None
    await asyncio.gather(handle.task)
    assert await state.conversations.record_feedback(handle.run_id, "down")
    await state.proposals.note_reason(handle.run_id, "wrong airport")
    return conversation, handle.run_id


def _age(state: ChatState, conversation: str, run_id: str, days: float) -> None:
    """Make one answer (and everything kept about it) `days` older, as if it had been asked then."""
    back = days * DAY_S

    def write(c: sqlite3.Connection) -> None:
        c.execute(
            "UPDATE conversations SET created_at = created_at - ?, updated_at = updated_at - ? WHERE id = ?",
            (back, back, conversation),
        )
        c.execute("UPDATE turns SET created_at = created_at - ? WHERE run_id = ?", (back, run_id))
        c.execute("UPDATE audit_entries SET at = at - ? WHERE run_id = ?", (back, run_id))

    state.file.now(write)


def _count(state: ChatState, table: str) -> int:
    return int(state.file.now(lambda c: c.execute(f"SELECT count(*) FROM {table}").fetchone()[0]))


async def test_past_the_period_every_store_forgets_and_younger_things_stay(state: ChatState) -> None:
    old_conversation, old_run = await _answered(state, "busiest airport last year?")
    _age(state, old_conversation, old_run, 40)
    new_conversation, new_run = await _answered(state, "busiest airport?")
    assert state.shared_runs is not None
    await state.shared_runs.open("stray", new_conversation)  # a run a crashed worker never took out
    await state.shared_runs.add("stray", [(1, "started", {"question": "?"})], beat=False)
    assert await state.conversations.claim_event("slack-event-1")

    now = [time.time()]
    deleted: list[tuple[str, int]] = []
    retention = Retention(state.file, 30, clock=lambda: now[0], on_deleted=lambda t, n: deleted.append((t, n)))

    first = {
        "queries": 1,
        "turns": 1,
        "feedback_reviews": 1,
        "conversations": 1,
        "audit_queries": 1,
        "audit_entries": 1,
    }
    assert await retention.sweep() == first
    assert await state.conversations.get_conversation(old_conversation) is None, "emptied and old: gone"
    assert await state.conversations.get_conversation(new_conversation) is not None
    assert [e.run_id for e in await state.audit.entries()] == [new_run]
    assert [p.run_id for p in await state.proposals.pending()] == [new_run]
    assert deleted == list(first.items())

    now[0] += 29 * DAY_S  # the young answer is 29 days old: kept
    assert await retention.sweep() == {}
    now[0] += 2 * DAY_S  # 31 days: gone, from every table
    swept = await retention.sweep()
    assert swept == {
        "queries": 1,
        "turns": 1,
        "feedback_reviews": 1,
        "conversations": 1,
        "live_events": 1,
        "live_runs": 1,
        "audit_queries": 1,
        "audit_entries": 1,
        "handled_events": 1,
    }
    for table in ("conversations", "turns", "queries", "feedback_reviews", "live_runs", "live_events"):
        assert _count(state, table) == 0, table
    assert _count(state, "audit_entries") == _count(state, "audit_queries") == _count(state, "handled_events") == 0


async def test_an_old_conversation_keeps_its_recent_answers(state: ChatState) -> None:
    conversation, old_run = await _answered(state, "first question")
    runs = RunRegistry(ScriptedRunner(), state.conversations)
    handle = runs.start(conversation, "a later one", [], platform="web", interface="web")
    assert handle.task is not None
    await asyncio.gather(handle.task)
    _age(state, conversation, old_run, 40)
    await Retention(state.file, 30).sweep()
    stored = await state.conversations.get_conversation(conversation)
    assert stored is not None and [t["question"] for t in stored["turns"]] == ["a later one"]


async def test_expired_sessions_go_and_live_ones_stay(state: ChatState) -> None:
    """Sign-in sessions past their own expiry are deleted; a live one still names its person."""
    now = time.time()
    alice = Person("email:alice@example.com", "Alice", "alice@example.com")
    expired = await state.sessions.start(alice, lifetime_s=60)
    live = await state.sessions.start(alice, lifetime_s=7200)
    assert await Retention(state.file, 30, clock=lambda: now + 120).sweep() == {"web_sessions": 1}
    assert await state.sessions.person(live) == alice and await state.sessions.person(expired) is None
    assert state.file.now(lambda c: c.execute("SELECT count(*) FROM web_sessions").fetchone()[0]) == 1


async def test_a_run_kept_for_a_takeover_nobody_took_over_is_swept_past_the_period(state: ChatState) -> None:
    durable = DurableRuns(state.file, lease_s=30, host="gone")
    for run_id, age_days in (("old", 40), ("young", 1)):
        kept = DurableRun(run_id, "c1", "slack", "slack", "Which airport?", created_at=time.time() - age_days * DAY_S)
        await durable.begin(kept)
        for rounds in range(2):  # its checkpoint, in the parts its rounds wrote
            assert await durable.save(run_id, Checkpoint(question="Which airport?", rounds=rounds))
    assert await Retention(state.file, 30).sweep() == {"durable_run_parts": 2, "durable_runs": 1}
    assert not await durable.holds("old") and await durable.holds("young")
    kept_parts = "SELECT run_id, count(*) FROM durable_run_parts GROUP BY run_id"
    assert state.file.now(lambda c: [tuple(row) for row in c.execute(kept_parts).fetchall()]) == [("young", 2)]


def test_every_table_that_keeps_what_people_asked_is_swept() -> None:
    """A table added to the state file that keeps questions, answers or people must be listed in SWEEPS
    (or here, with why not)."""
    not_personal = {"budget_reserved", "thread_turns"}  # holds of running questions; gone when they end
    not_personal |= {"eval_runs", "eval_case_results"}  # the eval suites' own names and results: no one's question
    with sqlite3.connect(":memory:") as conn:
        from chats import schema

        for step in schema.STEPS:
            step(conn)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables - not_personal <= set(TABLES)
    assert len(TABLES) == len(SWEEPS) == len(set(TABLES))
