"""Every question leaves one audit entry where its run ends, however it ended: who asked, where, under
which policy, each query's SQL with the rows and bytes ClickHouse itself said it read, and the outcome."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.runner import RunResult
from chats.audit import FAILED, AuditEntry, AuditFilter, AuditLog, AuditQuery, Origin, record_refusal
from chats.runs import RunRegistry
from chats.state import ChatState
from tests.agent.pipeline.test_pipeline import sql
from tests.agent.pipeline.test_policy import JFK_ONLY, PER_ORIGIN
from tests.agent.test_receipts import ORIGINS
from tests.chats.test_runs_done import ScriptedRunner
from tests.fakes.anthropic_api import FakeAnthropic, Reply


@pytest.fixture
def state(state_location: Path | str):
    state = ChatState(state_location)
    yield state
    state.close()


async def _ask(runs: RunRegistry, state: ChatState, question: str, *, owner: str = "", **start: object) -> str:
    conversation = await state.conversations.create_conversation(question, owner=owner)
    handle = runs.start(conversation, question, [], platform="web", interface="web", **start)  # type: ignore[arg-type]
    async for _ in runs.follow(handle):
        pass
    assert handle.task is not None
    await asyncio.gather(handle.task, return_exceptions=True)
    return handle.run_id


@pytest.mark.parametrize(
    ("end", "cancel", "outcome"),
    [
        ("answered", False, "answered"),
        ("failed", False, "error"),
        ("cancelled", True, "cancelled"),
        ("cancel raises", True, "cancelled"),
        ("raises", False, FAILED),
    ],
)
async def test_every_run_leaves_one_entry_however_it_ends(state: ChatState, end: str, cancel: bool, outcome: str):
    runner = ScriptedRunner(end=end)
    runs = RunRegistry(runner, state.conversations)
    conversation = await state.conversations.create_conversation("hi", owner="person:email:ann@example.com")
    handle = runs.start(conversation, "hi", [], platform="web", interface="web")
    if cancel:
        await runner.started.wait()
        runs.cancel(handle, "the test stopped it")
    assert handle.task is not None
    await asyncio.gather(handle.task, return_exceptions=True)
    entries = await state.audit.entries()
    assert [(e.run_id, e.outcome, e.question, e.interface) for e in entries] == [(handle.run_id, outcome, "hi", "web")]
    assert entries[0].person == "person:email:ann@example.com", "without an origin: the conversation's owner"


async def test_each_query_is_audited_with_what_the_embedded_engine_read(
    make_app, fake_anthropic: FakeAnthropic, state: ChatState
) -> None:
    fake_anthropic.script(Reply(tool_calls=[sql(ORIGINS)]), Reply(text="EWR had 120,835 departures [Q1]."))
    runs = RunRegistry(make_app().runner, state.conversations)
    origin = Origin("person:slack:T1:U1", "slack", "C42", "jfk-only")
    run_id = await _ask(runs, state, "busiest airport?", origin=origin, followups=False)
    [entry] = await state.audit.entries()
    assert (entry.run_id, entry.person, entry.interface, entry.channel, entry.policy, entry.outcome) == (
        run_id,
        "person:slack:T1:U1",
        "slack",
        "C42",
        "jfk-only",
        "answered",
    )
    [query] = entry.queries
    assert (query.label, query.sql, query.rows_read, query.error) == ("Q1", ORIGINS[1], 336776, None)
    assert query.bytes_read is not None and query.bytes_read > 0 and entry.rows_read == 336776


async def test_on_a_server_the_rows_read_come_from_clickhouses_summary(
    make_app, fake_anthropic: FakeAnthropic, server_db, state: ChatState
) -> None:
    fake_anthropic.script(Reply(tool_calls=[sql(ORIGINS)]), Reply(text="EWR had 120,835 departures [Q1]."))
    runs = RunRegistry(make_app(database=server_db).runner, state.conversations)
    await _ask(runs, state, "busiest airport?", followups=False)
    [entry] = await state.audit.entries()
    assert [(q.rows_read, (q.bytes_read or 0) > 0) for q in entry.queries] == [(336776, True)]


class UnderPolicy:
    """The runner, asked as an adapter that picked a policy asks it."""

    def __init__(self, runner: object) -> None:
        self._runner = runner

    async def run(self, question: str, **options: object) -> RunResult:
        options = {**options, "policy": JFK_ONLY}  # the registry passes its own (None when it is given none)
        return await self._runner.run(question, **options)  # type: ignore[attr-defined, no-any-return]


async def test_the_policy_a_run_read_under_is_audited(make_app, fake_anthropic: FakeAnthropic, state: ChatState):
    fake_anthropic.script(Reply(tool_calls=[sql(("Per origin", PER_ORIGIN))]), Reply(text="JFK had 111,279 [Q1]."))
    runs = RunRegistry(UnderPolicy(make_app().runner), state.conversations)  # type: ignore[arg-type]
    await _ask(runs, state, "departures?", followups=False)
    [entry] = await state.audit.entries()
    assert entry.policy == "jfk" and [(q.sql, q.error) for q in entry.queries] == [(PER_ORIGIN, None)]
    assert entry.queries[0].rows_read is not None and entry.queries[0].rows_read > 0


def _entry(run_id: str, at: float, person: str, *, policy: str = "", interface: str = "web") -> AuditEntry:
    return AuditEntry(
        run_id, at, person, interface, "", policy, "c", "q?", "answered", (AuditQuery("Q1", "SELECT 1", 1, 8),)
    )


async def test_entries_are_filtered_by_person_policy_interface_and_time(state: ChatState) -> None:
    log: AuditLog = state.audit
    for entry in (
        _entry("a", 100.0, "person:email:ann@example.com", policy="jfk"),
        _entry("b", 200.0, "person:email:bob@example.com", policy="lga", interface="slack"),
        _entry("c", 300.0, "person:email:ann@example.com", policy="lga"),
    ):
        await log.record(entry)
    await log.record(_entry("a", 999.0, "someone else"))  # a run is written once

    async def ids(which: AuditFilter) -> list[str]:
        return [e.run_id for e in await log.entries(which)]

    assert await ids(AuditFilter()) == ["a", "b", "c"]
    assert await ids(AuditFilter(person="person:email:ann@example.com")) == ["a", "c"]
    assert await ids(AuditFilter(policy="lga")) == ["b", "c"]
    assert await ids(AuditFilter(interface="slack")) == ["b"]
    assert await ids(AuditFilter(since=150.0, until=300.0)) == ["b"]
    [first] = await log.entries(AuditFilter(person="person:email:ann@example.com"), limit=1)
    assert first.queries == (AuditQuery("Q1", "SELECT 1", 1, 8),) and first.at == 100.0


async def test_a_refused_question_is_recorded_with_its_reason_and_read_nothing(state: ChatState) -> None:
    log: AuditLog = state.audit
    origin = Origin("person:email:ann@example.com", "slack", "C0GENERAL01", "jfk")
    await record_refusal(log, origin, "flights by origin?", "rate_limited")
    await record_refusal(log, origin, "flights by origin?", "rate_limited")  # each refusal is its own entry
    first, second = await log.entries(AuditFilter(person="person:email:ann@example.com"))
    assert first.run_id != second.run_id and first.run_id.startswith("refused-")
    assert (first.outcome, first.policy, first.channel, first.question) == (
        "refused: rate_limited",
        "jfk",
        "C0GENERAL01",
        "flights by origin?",
    )
    assert first.queries == () and first.rows_read == 0
