"""Reports that go on, through the kit (chats/report_runs.py) with the real pipeline, the scripted model fake
and the real engine, on both backends: Resume of a partial report, and a host restarted mid-report. Neither
runs a query that succeeded again (the engine's executions are counted)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.db import Database
from agent.reports import ReportBudget, ReportRequest
from chats.durable import DurableRuns
from chats.report_runs import NotResumable, ReportRuns
from chats.reports import RUNNING
from chats.runs import RunHandle, RunRegistry
from chats.state import ChatState
from tests.agent.pipeline.test_checkpoints import CountingDatabase
from tests.agent.pipeline.test_reports import MONTHS, ORIGINS, PARTIAL, QUESTION, RAIN, REPORT, sql
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply

OWNER = "person:email:alice@example.com"
WRITTEN = REPORT.replace("25 minutes", "19 minutes")


@pytest.fixture
def state(state_location: Path | str) -> Iterator[ChatState]:
    opened = ChatState(state_location)
    yield opened
    opened.close()


async def finished(runs: RunRegistry, handle: RunHandle) -> None:
    async def drain() -> None:
        async for _ in runs.follow(handle):
            pass

    await asyncio.wait_for(drain(), 60)


async def test_resume_continues_a_partial_report_without_running_its_queries_again(
    make_app, fake_anthropic: FakeAnthropic, db: Database, state: ChatState
) -> None:
    counting = CountingDatabase(db)
    runs = RunRegistry(make_app(database=counting).runner, state.conversations)
    conversation = await state.conversations.create_conversation(QUESTION, owner=OWNER)
    fake_anthropic.script(Reply(tool_calls=[sql(MONTHS, ORIGINS, RAIN)]), Reply(text=PARTIAL))
    request = ReportRequest(budget=ReportBudget(queries=2))
    first = runs.start(conversation, QUESTION, [], platform="web", interface="web", report=request)
    await finished(runs, first)
    stored = await state.reports.get(first.report_id)
    assert stored is not None and stored.state == "partial" and len(counting.executed) == 2
    assert stored.owner == OWNER and stored.report is not None and stored.report.stopped_by == "queries"

    fake_anthropic.reset()
    fake_anthropic.script(Reply(tool_calls=[sql(RAIN)]), Reply(text=WRITTEN))
    reports = ReportRuns(runs)
    again = await reports.resume(first.report_id)
    assert again.report_id == first.report_id and again.run_id != first.run_id
    await finished(runs, again)
    resumed = await state.reports.get(first.report_id)
    assert resumed is not None and resumed.state == "complete" and resumed.report is not None
    assert len(counting.executed) == 3 and "weather" in counting.executed[2], "Q1 and Q2 did not run again"
    assert resumed.report.runs == [first.run_id, again.run_id] and resumed.request is not None
    assert resumed.request.grants == 2 and resumed.report.used.queries == 3
    with pytest.raises(NotResumable):
        await reports.resume(first.report_id)  # complete: nothing to go on with


async def test_a_report_whose_host_restarts_mid_run_is_taken_on_by_the_next_host(
    make_app, fake_anthropic: FakeAnthropic, db: Database, state: ChatState
) -> None:
    hang = Hang()
    fake_anthropic.script(Reply(tool_calls=[sql(MONTHS)]), hang)
    counting = CountingDatabase(db)
    runs = RunRegistry(make_app(database=counting).runner, state.conversations)
    conversation = await state.conversations.create_conversation(QUESTION, owner=OWNER)
    handle = runs.start(conversation, QUESTION, [], platform="web", interface="web", report=ReportRequest())
    while (saved := await state.reports.checkpoint(handle.report_id)) is None or saved.rounds < 1:
        await asyncio.sleep(0.05)
    await runs.drain(0)  # SIGTERM with no grace: the running report is cancelled, and stays running
    hang.release.set()
    stopped = await state.reports.get(handle.report_id)
    assert stopped is not None and stopped.state == RUNNING and len(counting.executed) == 1

    fake_anthropic.reset()
    fake_anthropic.script(Reply(tool_calls=[sql(ORIGINS)]), Reply(text=WRITTEN))
    next_host = RunRegistry(make_app(database=counting).runner, state.conversations)
    taken = await ReportRuns(next_host).resume_unfinished(lambda name: None)
    assert [h.report_id for h in taken] == [handle.report_id]
    await finished(next_host, taken[0])
    done = await state.reports.get(handle.report_id)
    assert done is not None and done.state == "complete" and done.report is not None
    assert len(counting.executed) == 2 and "month = 7" in counting.executed[1], "Q1 did not run again"
    assert [q.id for q in done.report.queries] == ["Q1", "Q2"] and done.run_id == taken[0].run_id
    assert await ReportRuns(next_host).resume_unfinished(lambda name: None) == []


async def test_a_report_whose_host_dies_is_taken_over_by_another_host_writing_the_same_report(
    make_app, fake_anthropic: FakeAnthropic, db: Database, state_location: Path | str
) -> None:
    """The durable runs' takeover (chats/durable.py, RunRegistry.take_over) carries a report run on: the
    second host writes the same report from the first host's checkpoint, running no query again."""
    hang = Hang()
    fake_anthropic.script(Reply(tool_calls=[sql(MONTHS)]), hang)
    counting = CountingDatabase(db)
    states = [ChatState(state_location, workers=2) for _ in range(2)]
    a, b = (
        RunRegistry(
            make_app(database=counting).runner,
            s.conversations,
            shared=s.shared_runs,
            durable=DurableRuns(s.file, lease_s=30, host=f"host-{n}"),
        )
        for n, s in enumerate(states)
    )
    try:
        conversation = await states[0].conversations.create_conversation(QUESTION, owner=OWNER)
        first = a.start(conversation, QUESTION, [], platform="web", interface="web", report=ReportRequest())
        while (saved := await states[0].reports.checkpoint(first.report_id)) is None or saved.rounds < 1:
            await asyncio.sleep(0.05)
        assert b._durable is not None and a._durable is not None
        a._durable._file.now(lambda c: c.execute("UPDATE durable_runs SET lease_until = 1"))  # host a is gone
        kept = await b._durable.claim_lapsed({"web"})
        assert kept is not None and kept.run_id == first.run_id

        fake_anthropic.reset()
        fake_anthropic.script(Reply(tool_calls=[sql(ORIGINS)]), Reply(text=WRITTEN))
        handle = await b.take_over(kept, None)
        assert handle is not None and handle.report_id == first.report_id
        await finished(b, handle)
        done = await states[1].reports.get(first.report_id)
        assert done is not None and done.state == "complete" and done.report is not None
        assert len(counting.executed) == 2 and "month = 7" in counting.executed[1], "Q1 did not run again"
        assert [q.id for q in done.report.queries] == ["Q1", "Q2"]
    finally:
        hang.release.set()
        if first.task is not None:
            first.task.cancel()
        for registry in (a, b):
            await registry.shutdown()
        for s in states:
            s.close()


async def test_a_resumed_report_whose_host_dies_is_delivered_by_the_host_that_takes_it_over(
    make_app, fake_anthropic: FakeAnthropic, db: Database, state_location: Path | str
) -> None:
    """Resume passes the adapter's delivery context (the Slack thread, the web's budget hold) on with the run:
    another host taking the resumed run over knows where to deliver it."""
    states = [ChatState(state_location, workers=2) for _ in range(2)]
    a, b = (
        RunRegistry(
            make_app(database=db).runner,
            s.conversations,
            shared=s.shared_runs,
            durable=DurableRuns(s.file, lease_s=30, host=f"host-{n}"),
        )
        for n, s in enumerate(states)
    )
    hang = Hang()
    delivery = {"question": {"channel": "C1", "thread_ts": "1.5"}, "reservation": {"key": "k"}}
    try:
        conversation = await states[0].conversations.create_conversation(QUESTION, owner=OWNER)
        fake_anthropic.script(Reply(tool_calls=[sql(MONTHS, ORIGINS, RAIN)]), Reply(text=PARTIAL))
        request = ReportRequest(budget=ReportBudget(queries=2))
        first = a.start(conversation, QUESTION, [], platform="web", interface="web", report=request)
        await finished(a, first)
        fake_anthropic.reset()
        fake_anthropic.script(Reply(tool_calls=[sql(RAIN)]), hang)
        again = await ReportRuns(a).resume(first.report_id, delivery=delivery)
        while (saved := await states[0].reports.checkpoint(first.report_id)) is None or saved.rounds < 2:
            await asyncio.sleep(0.05)
        assert a._durable is not None and b._durable is not None
        a._durable._file.now(lambda c: c.execute("UPDATE durable_runs SET lease_until = 1"))  # host a is gone
        kept = await b._durable.claim_lapsed({"web"})
        assert kept is not None and kept.run_id == again.run_id and kept.delivery == delivery
        stored = await states[1].reports.get(first.report_id)
        assert stored is not None and stored.delivery == delivery, "kept with the report too"
    finally:
        hang.release.set()
        for registry in (a, b):
            await registry.shutdown()
        for s in states:
            s.close()


async def test_a_restarted_host_hands_each_report_it_goes_on_with_to_its_delivery(
    make_app, fake_anthropic: FakeAnthropic, db: Database, state: ChatState
) -> None:
    """Without durable runs (one host, SQLite) the report's own record keeps where it goes: the next host gets
    it back with the run it starts, the messages the first host posted included."""
    hang = Hang()
    fake_anthropic.script(Reply(tool_calls=[sql(MONTHS)]), hang)
    runs = RunRegistry(make_app(database=db).runner, state.conversations)
    conversation = await state.conversations.create_conversation(QUESTION, owner=OWNER)
    delivery = {"question": {"channel": "C1", "thread_ts": "1.5"}, "messages": []}
    handle = runs.start(
        conversation, QUESTION, [], platform="slack", interface="slack", report=ReportRequest(), delivery=delivery
    )
    while (saved := await state.reports.checkpoint(handle.report_id)) is None or saved.rounds < 1:
        await asyncio.sleep(0.05)
    await runs.update_delivery(handle, {**delivery, "messages": ["1.6"]})
    await runs.drain(0)
    hang.release.set()

    fake_anthropic.reset()
    fake_anthropic.script(Reply(text=WRITTEN))
    next_host = RunRegistry(make_app(database=db).runner, state.conversations)
    handed: list[tuple[str, dict[str, object]]] = []
    taken = await ReportRuns(next_host).resume_unfinished(
        lambda name: None, deliver=lambda h, d: handed.append((h.run_id, d))
    )
    assert handed == [(taken[0].run_id, {**delivery, "messages": ["1.6"]})]
    await finished(next_host, taken[0])
