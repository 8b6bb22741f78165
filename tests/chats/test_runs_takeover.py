"""A run taken over by another host (chats/runs.py `take_over`), on both backends: two hosts as two run
registries over their own connections to one state. The first keeps its run with a checkpoint and stops
(its lease lapses); the second goes on under the same run id, its event log continuing the first's, and
stores one turn. A run that may not be resumed ends with a message, never silence."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from agent.access.policy import Policy
from agent.runner import (
    AnswerEvent,
    Checkpoint,
    CheckpointSink,
    EventSink,
    ExecutingEvent,
    Outcome,
    RunResult,
    Turn,
    ignore_events,
)
from chats.audit import Origin
from chats.durable import DurableRuns, ResumeLimits
from chats.runs import RunHandle, RunRegistry
from chats.state import ChatState

LEASE_S = 30.0
OPS = Policy("ops", MappingProxyType({"nycflights13.airlines": None}))


class StoppingRunner:
    """Round one (Q1, a checkpoint, some answer text), then it stops as a dead host's run does: never
    returns. Resumed, it answers. `more` releases a stopped run to checkpoint once more."""

    def __init__(self, *, answers_when_released: bool = False) -> None:
        self.answers_when_released = answers_when_released  # released, it answers with no checkpoint first
        self.checkpointed = asyncio.Event()
        self.more = asyncio.Event()
        self.resumed_from: list[Checkpoint] = []
        self.policies: list[str | None] = []

    async def run(
        self,
        question: str,
        *,
        history: Sequence[Turn] = (),
        platform: Any = "cli",
        interface: Any = "cli",
        on_event: EventSink = ignore_events,
        followups: bool = True,
        policy: Any = None,
        checkpoint: CheckpointSink | None = None,
        resume: Checkpoint | None = None,
    ) -> RunResult:
        assert checkpoint is not None
        self.policies.append(policy.name if policy is not None else None)
        if resume is not None:
            self.resumed_from.append(resume)
            await on_event(AnswerEvent(text="EWR [Q1]."))
            return RunResult(question=question, answer="EWR [Q1].", resumed=resume.resumed + 1)
        await on_event(ExecutingEvent(query_id="Q1", question="Departures", sql="SELECT 1"))
        await checkpoint(Checkpoint(question=question, rounds=1, query_ids_taken=1))
        await on_event(AnswerEvent(text="Half an ans"))
        self.checkpointed.set()
        await self.more.wait()
        if self.answers_when_released:
            return RunResult(question=question, answer="A late answer.")
        await checkpoint(Checkpoint(question=question, rounds=2, query_ids_taken=1))
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


@pytest.fixture
async def hosts(state_location: Path | str) -> AsyncIterator[Callable[[StoppingRunner], RunRegistry]]:
    opened: list[ChatState] = []
    registries: list[RunRegistry] = []

    def host(runner: StoppingRunner) -> RunRegistry:
        state = ChatState(state_location, workers=2)  # its own connection, the run log shared
        opened.append(state)
        durable = DurableRuns(state.file, lease_s=LEASE_S, host=f"host-{len(opened)}")
        registries.append(RunRegistry(runner, state.conversations, shared=state.shared_runs, durable=durable))
        return registries[-1]

    yield host
    for registry in registries:
        await registry.shutdown()
    for state in opened:
        state.close()


def lapse(registry: RunRegistry) -> None:
    """Its host stopped renewing long enough ago."""
    assert registry._durable is not None
    registry._durable._file.now(lambda c: c.execute("UPDATE durable_runs SET lease_until = 1"))


async def _started_and_stopped(a: RunRegistry, runner: StoppingRunner) -> RunHandle:
    conversation = await a._store.create_conversation("Which airport?", owner="person:ann")
    origin = Origin("person:ann", "web", "", "")
    handle = a.start(
        conversation,
        "Which airport?",
        [],
        platform="web",
        interface="web",
        origin=origin,
        delivery={"k": "v"},
        policy=OPS,
    )
    await asyncio.wait_for(runner.checkpointed.wait(), 10)
    await asyncio.sleep(0.5)  # its last events reach the shared log too (the checkpoint's are there already)
    return handle


async def _all(registry: RunRegistry, handle: RunHandle) -> list[Any]:
    return [event async for event in registry.follow(handle)]


async def test_a_run_taken_over_goes_on_under_its_id_its_log_continued_and_is_stored_once(hosts) -> None:
    runner_a, runner_b = StoppingRunner(), StoppingRunner()
    a, b = hosts(runner_a), hosts(runner_b)
    first = await _started_and_stopped(a, runner_a)
    assert b._durable is not None and await b._durable.claim_lapsed({"web"}) is None  # a still holds it
    lapse(a)
    kept = await b._durable.claim_lapsed({"web"})
    assert kept is not None and kept.run_id == first.run_id and kept.delivery == {"k": "v"}
    assert kept.policy == "ops" and kept.origin == Origin("person:ann", "web", "", "")
    handle = await b.take_over(kept, OPS, refused=ResumeLimits(2, 900).why_not(kept))
    assert handle is not None and handle.run_id == first.run_id and handle.policy == "ops"
    assert handle.origin.person == "person:ann"
    events = await _all(b, handle)
    assert [e.id for e in events] == list(range(1, len(events) + 1))  # one log, its numbers going on
    names = [e.name for e in events]
    assert names == ["started", "executing", "answer", "answer", "answer", "done"]
    assert events[3].body.restart and events[4].body.text == "EWR [Q1]."  # the lost round's words discarded
    assert events[-1].body.result.answer == "EWR [Q1]." and events[-1].body.result.resumed == 1
    assert [c.rounds for c in runner_b.resumed_from] == [1] and runner_b.resumed_from[0].query_ids_taken == 1
    assert runner_a.policies == runner_b.policies == ["ops"]  # the resumed run keeps its policy
    _, stored = await b._store.run_events(first.run_id)
    assert [row["event"] for row in stored] == names
    assert not await b._durable.holds(first.run_id)  # a normal end forgets it
    (entry,) = await b.audit.entries()  # one audit entry, whose asker is the first host's
    assert entry.run_id == first.run_id and entry.person == "person:ann" and entry.outcome == "answered"

    # The first host was only frozen: its next checkpoint finds its lease gone, and it ends silently.
    runner_a.more.set()
    await asyncio.wait_for(asyncio.gather(first.task, return_exceptions=True), 10)
    assert first.superseded and "done" not in [e.name for e in first.events]
    _, stored_again = await b._store.run_events(first.run_id)
    assert [row["event"] for row in stored_again] == names


async def test_a_run_past_its_resumes_ends_with_a_message_in_its_chat(hosts) -> None:
    runner_a, runner_b = StoppingRunner(), StoppingRunner()
    a, b = hosts(runner_a), hosts(runner_b)
    first = await _started_and_stopped(a, runner_a)
    lapse(a)
    kept = await b._durable.claim_lapsed({"web"})
    why = ResumeLimits(max_resumes=0, max_age_s=900).why_not(kept)
    assert why is not None
    handle = await b.take_over(kept, None, refused=why)
    events = await _all(b, handle)
    assert [e.name for e in events][-2:] == ["error", "done"]
    assert "stopped" in events[-2].body.message and "ask again" in events[-2].body.message
    assert events[-1].body.result.outcome is Outcome.ERROR
    assert runner_b.resumed_from == []  # no model call made again
    assert (await b._store.run_events(first.run_id)) is not None and not await b._durable.holds(first.run_id)
    runner_a.more.set()


async def test_a_reader_on_a_third_host_follows_the_run_across_the_takeover(hosts) -> None:
    runner_a, runner_b = StoppingRunner(), StoppingRunner()
    a, b, reader = hosts(runner_a), hosts(runner_b), hosts(StoppingRunner())
    first = await _started_and_stopped(a, runner_a)
    following = await reader.follow_elsewhere(first.run_id)
    assert following is not None
    seen = [await anext(following) for _ in range(3)]  # started, executing, the half answer
    lapse(a)
    handle = await b.take_over(await b._durable.claim_lapsed({"web"}), None)
    rest = [event async for event in following]
    assert [e.id for e in seen + rest] == list(range(1, len(seen + rest) + 1))
    assert rest[-1].name == "done" and rest[-1].body.result.answer == "EWR [Q1]."
    await asyncio.gather(handle.task)
    runner_a.more.set()


async def test_a_host_going_away_hands_its_run_over_to_be_taken_at_once(hosts) -> None:
    runner_a, runner_b = StoppingRunner(), StoppingRunner()
    a, b = hosts(runner_a), hosts(runner_b)
    first = await _started_and_stopped(a, runner_a)
    assert await a.drain(0.1, hand_over=True) == (0, 1)
    assert first.superseded and "done" not in [e.name for e in first.events]  # this copy ended silently
    assert await a._store.run_events(first.run_id) is None  # not stored as cancelled
    kept = await b._durable.claim_lapsed({"web"})  # at once: no lease to wait out
    assert kept is not None and kept.run_id == first.run_id
    events = await _all(b, await b.take_over(kept, OPS))
    assert events[-1].body.result.answer == "EWR [Q1]." and events[-1].body.result.resumed == 1


async def test_without_hand_over_a_drained_run_is_cancelled_and_stored_as_before(hosts) -> None:
    runner_a = StoppingRunner()
    a, b = hosts(runner_a), hosts(StoppingRunner())
    first = await _started_and_stopped(a, runner_a)
    assert await a.drain(0.1) == (0, 1)
    assert first.events[-1].name == "done" and not first.superseded
    assert not await b._durable.holds(first.run_id)  # it ended here: nothing to take over


async def test_a_host_that_froze_past_its_lease_and_then_answers_leaves_the_run_to_the_one_that_took_it(
    hosts,
) -> None:
    runner_a, runner_b = StoppingRunner(answers_when_released=True), StoppingRunner()
    a, b = hosts(runner_a), hosts(runner_b)
    first = await _started_and_stopped(a, runner_a)
    lapse(a)
    handle = await b.take_over(await b._durable.claim_lapsed({"web"}), OPS)
    events = await _all(b, handle)
    runner_a.more.set()  # the first host wakes and answers before any checkpoint could tell it
    await asyncio.wait_for(asyncio.gather(first.task), 10)
    assert first.superseded and "done" not in [e.name for e in first.events]
    _, stored = await b._store.run_events(first.run_id)
    assert [row["event"] for row in stored] == [e.name for e in events]  # the taker's turn, stored once
    assert "A late answer." not in str(stored)
