"""What the kit refuses before a Resume starts a run (chats/report_runs.py): a report asked under one policy
goes on under no other (its checkpoint's rows are that policy's), and a report is resumed a bounded number of
times. Either way nothing runs and the report stays partial, so the Slack path answers it in words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.access.policy import Policy
from agent.reports import ReportBudget, ReportRequest
from chats import report_runs
from chats.report_runs import NotResumable, PolicyChanged, ReportRuns
from chats.runs import RunRegistry
from chats.state import ChatState
from tests.agent.pipeline.test_reports import MONTHS, ORIGINS, PARTIAL, QUESTION, RAIN, sql
from tests.chats.test_report_runs import OWNER, finished
from tests.fakes.anthropic_api import FakeAnthropic, Reply


@pytest.fixture
def state(state_location: Path | str) -> Iterator[ChatState]:
    opened = ChatState(state_location)
    yield opened
    opened.close()


async def partial_report(make_app, fake_anthropic: FakeAnthropic, state: ChatState) -> tuple[RunRegistry, str]:
    runs = RunRegistry(make_app().runner, state.conversations)
    conversation = await state.conversations.create_conversation(QUESTION, owner=OWNER)
    fake_anthropic.script(Reply(tool_calls=[sql(MONTHS, ORIGINS, RAIN)]), Reply(text=PARTIAL))
    request = ReportRequest(budget=ReportBudget(queries=2))
    first = runs.start(conversation, QUESTION, [], platform="web", interface="web", report=request)
    await finished(runs, first)
    assert first.report_id is not None
    return runs, first.report_id


async def test_resume_under_another_policy_is_refused_before_a_run_starts(
    make_app, fake_anthropic: FakeAnthropic, state: ChatState
) -> None:
    runs, report_id = await partial_report(make_app, fake_anthropic, state)
    fake_anthropic.reset()
    jfk = Policy(name="jfk", tables={"nycflights13.flights": "origin = 'JFK'"})
    with pytest.raises(PolicyChanged, match="Ask it again as a new report"):
        await ReportRuns(runs).resume(report_id, policy=jfk)
    stored = await state.reports.get(report_id)
    assert fake_anthropic.requests == [] and stored is not None and stored.state == "partial"


async def test_a_report_is_resumed_a_bounded_number_of_times(
    make_app, fake_anthropic: FakeAnthropic, state: ChatState, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, report_id = await partial_report(make_app, fake_anthropic, state)
    fake_anthropic.reset()
    monkeypatch.setattr(report_runs, "MAX_RESUMES", 0)  # its first run already holds the one grant allowed
    with pytest.raises(NotResumable, match="resumed 0 times already"):
        await ReportRuns(runs).resume(report_id)
    stored = await state.reports.get(report_id)
    assert fake_anthropic.requests == [] and stored is not None and stored.state == "partial"
