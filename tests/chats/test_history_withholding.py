"""chats/conversations.py: the history a follow-up hands the model leaves out what an earlier turn read
under a policy the follow-up's does not cover (`may_read`, from `readable_under`): the turn's question
stays, its answer (which can state the figures), rows and transcript go, a note in their place."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from agent.access.policy import Policies, Policy
from agent.runner import RunResult
from chats.conversations import WITHHELD_ANSWER, readable_under
from chats.state import ChatState

JFK = Policy("jfk", MappingProxyType({"nycflights13.flights": "origin = 'JFK'"}))
EWR = Policy("ewr", MappingProxyType({"nycflights13.flights": "origin = 'EWR'"}))
POLICIES = Policies((JFK, EWR), Policy("no-data"))


def _result(question: str, answer: str, policy: str | None) -> RunResult:
    transcript = [{"role": "user", "content": f"{answer} rows: 111279"}]
    return RunResult(question=question, answer=answer, policy=policy, transcript=transcript)


async def test_history_and_turns_by_run_keep_an_uncovered_turns_question_alone(tmp_path: Path) -> None:
    state = ChatState(tmp_path / "c.sqlite3")
    store = state.conversations
    key = "slack:T:C:1"
    conversation = await store.create_conversation("q", key=key, interface="slack")
    await store.save_turn(conversation, "run-jfk", _result("jfk?", "JFK flew 111279.", "jfk"), [])
    await store.save_turn(conversation, "run-ewr", _result("ewr?", "EWR flew 120835.", "ewr"), [])
    await store.save_turn(conversation, "run-none", _result("before?", "All flew 336776.", None), [])
    under_jfk = readable_under(POLICIES, JFK)
    history = await store.history(conversation, may_read=under_jfk)
    by_run = await store.turns_by_run(["run-jfk", "run-ewr", "run-none"], key=key, may_read=under_jfk)
    whole = await store.history(conversation)
    state.close()
    assert [t.question for t in history] == ["jfk?", "ewr?", "before?"], "every question stays"
    assert [t.answer for t in history] == ["JFK flew 111279.", WITHHELD_ANSWER, WITHHELD_ANSWER]
    assert history[0].transcript and not history[1].transcript and not history[2].transcript
    assert [t.answer for t in by_run.values()] == [t.answer for t in history]
    assert [t.answer for t in whole] == ["JFK flew 111279.", "EWR flew 120835.", "All flew 336776."], "no reader"


def test_every_turn_is_readable_without_a_policy_file_or_a_reader() -> None:
    assert readable_under(None, JFK) is None and readable_under(POLICIES, None) is None
    may_read = readable_under(POLICIES, JFK)
    assert may_read is not None and may_read("jfk") and not may_read("ewr") and not may_read("")
