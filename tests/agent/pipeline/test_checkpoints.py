"""Durable runs in the library: a run hands its progress to a checkpoint sink at its start and after
every completed round, and `resume=` goes on from one (in another process: a JSON round trip) without
running any of its queries again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent.access.policy import Policy
from agent.checkpoint_form import CheckpointPart, part_between
from agent.db import Database
from agent.pipeline.context import user_text
from agent.runner import Checkpoint, Outcome
from tests.conftest import Recorder
from tests.fakes.anthropic_api import FakeAnthropic, Hang, Reply

Q1 = "SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY n DESC"
Q2 = "SELECT count() AS n FROM nycflights13.airlines"


def sql(question: str, text: str) -> tuple[str, dict[str, Any]]:
    return ("execute_sql", {"queries": [{"question": question, "sql": text}]})


class CountingDatabase:
    """The session's database, counting the queries the pipeline has the engine run."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.executed: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    async def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        self.executed.append(sql)
        return await self._db.execute(sql, *args, **kwargs)


class Checkpoints:
    """A sink that keeps each checkpoint as the kit's store does (chats/durable.py): the JSON of the part it
    adds to the one before (agent/checkpoint_form.py), read back by folding them."""

    def __init__(self) -> None:
        self.stored: list[str] = []  # the parts, as written
        self.handed: list[Checkpoint] = []  # the checkpoints the run handed over
        self.arrived = asyncio.Event()
        self._written: dict[str, Any] | None = None

    async def __call__(self, checkpoint: Checkpoint) -> None:
        form = checkpoint.model_dump(mode="json")
        self.stored.append(part_between(self._written, form).model_dump_json())
        self._written = form
        self.handed.append(checkpoint)
        self.arrived.set()

    def rounds(self) -> list[int]:
        return [CheckpointPart.model_validate_json(part).rounds for part in self.stored]

    def last(self) -> Checkpoint:
        folded = Checkpoint.of_parts(CheckpointPart.model_validate_json(part) for part in self.stored)
        assert folded is not None
        return folded

    async def until_round(self, rounds: int) -> None:
        while not self.stored or self.last().rounds < rounds:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), 30)


async def _killed_after_round_one(make_app, fake_anthropic: FakeAnthropic, db: Database) -> tuple[Checkpoint, int]:
    """A run whose host dies during its second model call: the checkpoint it left, and the queries it ran."""
    hang = Hang()
    fake_anthropic.script(Reply(tool_calls=[("think", {"content": "Departures first."}), sql("Departures", Q1)]), hang)
    counting = CountingDatabase(db)
    sink = Checkpoints()
    app = make_app(database=counting)
    task = asyncio.create_task(app.runner.run("Which airport, and how many airlines?", checkpoint=sink))
    await sink.until_round(1)
    task.cancel()  # the host is gone: nothing after the checkpoint counts
    hang.release.set()
    await asyncio.gather(task, return_exceptions=True)
    return sink.last(), len(counting.executed)


async def test_a_resumed_run_goes_on_at_the_next_round_running_no_completed_query_again(
    make_app, fake_anthropic: FakeAnthropic, db: Database
) -> None:
    saved, ran_before = await _killed_after_round_one(make_app, fake_anthropic, db)
    assert ran_before == 1 and saved.rounds == 1 and [q.id for q in saved.queries] == ["Q1"]
    assert saved.query_ids_taken == 1 and saved.metrics.llm_calls == 1 and saved.model_calls[0].calls == 1

    fake_anthropic.reset()
    fake_anthropic.script(
        Reply(tool_calls=[sql("Airlines", Q2)]),
        Reply(text="EWR had the most departures, 120,835 [Q1]; there are 16 airlines [Q2]."),
    )
    counting = CountingDatabase(db)
    later = Checkpoints()
    events = Recorder()
    result = await make_app(database=counting).runner.run(
        saved.question, resume=saved, checkpoint=later, on_event=events, followups=False
    )
    assert counting.executed and len(counting.executed) == 1 and "airlines" in counting.executed[0]  # Q2 only
    assert result.outcome is Outcome.ANSWERED and result.answer.startswith("EWR had the most")
    assert [q.id for q in result.queries] == ["Q1", "Q2"]  # the counter went on from the checkpoint
    assert result.queries[0].result.rows[0] == ["EWR", "120835"]
    assert [e.query_id for e in events.of("executing")] == ["Q2"]  # Q1's events were the first host's
    # The model was sent the checkpoint's messages: the question, round one's call and Q1's result.
    first = fake_anthropic.requests[0]["messages"]
    assert "| EWR | 120835 |" in str(first[-1]["content"]) and first[0]["content"][0]["text"].startswith("Which")
    assert result.resumed == 1 and result.receipt is not None and result.receipt.resumed == 1
    assert "resumed after a host stopped" in result.receipt.line()
    assert result.receipt.queries == 2 and result.metrics.sql_queries == 2
    assert result.metrics.rounds == 3 and result.receipt.models[0].calls == 3  # the lost call is not billed twice
    assert result.thinking == ["Departures first."]
    assert later.rounds() == [2]
    assert later.last().resumed == 1  # a second takeover counts on from it
    assert result.transcript[0]["content"][0]["text"].startswith("Which")  # the turn for the next question


async def test_a_run_checkpoints_when_it_starts_and_after_every_round(make_app, fake_anthropic: FakeAnthropic) -> None:
    fake_anthropic.script(
        Reply(tool_calls=[sql("Departures", Q1)]),
        Reply(text="EWR [Q1]."),  # no figure: no correction round
    )
    sink = Checkpoints()
    result = await make_app().runner.run("Which airport?", checkpoint=sink, followups=False)
    assert result.outcome is Outcome.ANSWERED and result.resumed == 0 and result.receipt.resumed == 0
    saved = sink.handed
    assert sink.rounds() == [0, 1]  # the answering round ends the run: nothing left to resume
    assert sink.last() == saved[-1]
    assert saved[0].queries == [] and saved[0].messages[-1]["role"] == "user"
    assert saved[1].messages[-1]["content"][0]["type"] == "tool_result"


async def test_a_checkpoint_goes_on_only_as_its_own_question_under_its_own_policy(make_app) -> None:
    saved = Checkpoint(question="Which airport?", policy="finance", rounds=1)
    runner = make_app().runner
    with pytest.raises(ValueError, match="another question"):
        await runner.run("Something else?", resume=saved)
    with pytest.raises(ValueError, match="finance"):
        await runner.run("Which airport?", resume=saved, policy=Policy(name="ops", tables={}))


def test_a_checkpoint_of_another_format_is_refused_and_one_of_the_release_before_still_reads() -> None:
    with pytest.raises(ValueError):
        Checkpoint.model_validate({"version": 3, "question": "q"})
    before = {"version": 1, "question": "q", "rounds": 2, "messages": [user_text("q")], "result_chars": 0}
    assert Checkpoint.model_validate(before).rounds == 2
