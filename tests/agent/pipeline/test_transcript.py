"""What a turn leaves for the next question's history: the messages of an answered turn, ending in the
answer as given; none of a cancelled or failed one, whose messages may end in a tool call with no result
(the API refuses such a history)."""

from __future__ import annotations

import asyncio

from agent.db import Database
from agent.pipeline.loop import _transcript
from agent.runner import Outcome, RunResult
from tests.agent.pipeline.test_pipeline import HEAVY, Recorder, ask, sql, until_running
from tests.fakes.anthropic_api import FakeAnthropic, Reply

TOOL_CALL = {"type": "tool_use", "id": "toolu_1", "name": "execute_sql", "input": {"queries": []}}


async def test_an_answered_turn_keeps_its_messages(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql(("n", "SELECT count() FROM nycflights13.airlines"))]), Reply(text="16 [Q1].")
    )
    result, _ = await ask(make_app(), "How many airlines?")
    assert [m["role"] for m in result.transcript] == ["user", "assistant", "user", "assistant"]
    assert result.transcript[-1]["content"] == [{"type": "text", "text": result.answer}]


async def test_a_turn_cancelled_during_its_query_keeps_no_messages(
    make_app, fake_anthropic: FakeAnthropic, db: Database
) -> None:
    fake_anthropic.script(Reply(tool_calls=[sql(("heavy", HEAVY))]))
    recorder = Recorder()
    task = asyncio.create_task(make_app().runner.run("q", on_event=recorder, followups=False))
    while not recorder.of("executing") and not task.done():
        await asyncio.sleep(0.05)
    await until_running(db, task)
    task.cancel()
    result = await task
    assert result.outcome is Outcome.CANCELLED and result.answer  # the person still sees what it had
    assert result.transcript == []


def test_a_failed_or_cancelled_turn_keeps_no_messages() -> None:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": [TOOL_CALL]}]
    for outcome in (Outcome.ERROR, Outcome.CANCELLED):
        result = RunResult(question="q", answer="Something went wrong.", outcome=outcome)
        assert _transcript(messages, result) == [], outcome
    answered = RunResult(question="q", answer="16.", outcome=Outcome.ANSWERED)
    assert _transcript(messages, answered)[-1] == {"role": "assistant", "content": [{"type": "text", "text": "16."}]}
