"""A serving process that alone keeps its state (a SQLite file) goes on, as it starts, with the reports its
last run was writing when it stopped: from their checkpoints, running no query that succeeded again."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent.db import Database
from agent.reports import ReportRequest
from chats.runs import RunRegistry
from chats.state import ChatState, state_path
from process.service import Service
from tests.agent.pipeline.test_checkpoints import CountingDatabase
from tests.agent.pipeline.test_reports import MONTHS, ORIGINS, QUESTION, REPORT, sql
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply


async def test_a_restarted_server_goes_on_with_the_report_it_was_writing(
    make_app, fake_anthropic: FakeAnthropic, db: Database, tmp_path: Path
) -> None:
    counting = CountingDatabase(db)
    hang = Hang()
    fake_anthropic.script(Reply(tool_calls=[sql(MONTHS)]), hang)
    state = ChatState(state_path(tmp_path))
    before = RunRegistry(make_app(database=counting, agent_data_dir=tmp_path).runner, state.conversations)
    conversation = await state.conversations.create_conversation(QUESTION, interface="web", owner="person:local")
    handle = before.start(conversation, QUESTION, [], platform="web", interface="web", report=ReportRequest())
    while (saved := await state.reports.checkpoint(handle.report_id)) is None or saved.rounds < 1:
        await asyncio.sleep(0.05)
    await before.drain(0)  # the server stops: the report stays running
    hang.release.set()
    state.close()

    fake_anthropic.reset()
    fake_anthropic.script(Reply(tool_calls=[sql(ORIGINS)]), Reply(text=REPORT.replace("25 minutes", "19 minutes")))
    agent = make_app(database=counting, agent_data_dir=tmp_path)
    service = await Service.open(agent.settings, web=True, slack=False, agent=agent)
    try:
        for _ in range(600):
            stored = await service.state.reports.get(handle.report_id)
            if stored is not None and not stored.running:
                break
            await asyncio.sleep(0.05)
        assert stored is not None and stored.state == "complete" and stored.report is not None
        assert len(counting.executed) == 2 and "month = 7" in counting.executed[1], "Q1 did not run again"
    finally:
        await service.close()
