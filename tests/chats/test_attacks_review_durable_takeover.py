"""An outside review's attacks on a run taken over (chats/runs.py `take_over`), on both backends: a first
host that was only frozen wakes while the taker goes on (split brain). Two hosts as two run registries over
their own connections to one state, as tests/chats/test_runs_takeover.py builds them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agent.runner import AnswerEvent, Checkpoint, CheckpointSink, EventSink, RunResult, Turn, ignore_events
from tests.chats.test_runs_takeover import OPS, StoppingRunner, _started_and_stopped, hosts, lapse

__all__ = ["hosts"]  # the fixture, shared with the takeover tests


class WakingRunner(StoppingRunner):
    """The first host's run: round one and its checkpoint, then frozen; woken (`more`), it goes on with the
    round it was in (its words streamed) before its next checkpoint could tell it the run was taken."""

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
        await checkpoint(Checkpoint(question=question, rounds=1, query_ids_taken=1))
        await on_event(AnswerEvent(text="Half an ans"))
        self.checkpointed.set()
        await self.more.wait()
        await on_event(AnswerEvent(text="wer, then "))  # its numbers now run level with the taker's
        await on_event(AnswerEvent(text="A late answer from the frozen host."))
        await asyncio.Event().wait()  # its next model call, long
        raise AssertionError("unreachable")


class SlowResume(StoppingRunner):
    """The taker's run: resumed, it thinks a while (`go`) before it answers."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    async def run(self, question: str, **kwargs: Any) -> RunResult:
        resume = kwargs["resume"]
        assert resume is not None
        await self.go.wait()
        await kwargs["on_event"](AnswerEvent(text="EWR [Q1]."))
        return RunResult(question=question, answer="EWR [Q1].", resumed=resume.resumed + 1)


async def test_a_frozen_host_that_wakes_writes_nothing_into_the_log_of_the_run_another_host_took(hosts) -> None:
    """Finding (split brain): the first host learns it lost the run only at its next checkpoint or its end;
    meanwhile its sharing task goes on copying its events to the shared log under the same event numbers
    the taker uses (`ON CONFLICT DO NOTHING`: whichever writes a number first wins). Readers on other hosts
    are shown the frozen host's words inside the taker's answer, and the taker's events of those numbers
    are dropped from the shared log. Safe: a host writes a run's shared log only while it holds its lease
    (the write checks the holder in the same transaction), or the taker's numbers cannot collide."""
    runner_a, runner_b = WakingRunner(), SlowResume()
    a, b = hosts(runner_a), hosts(runner_b)
    first = await _started_and_stopped(a, runner_a)
    lapse(a)
    assert b._durable is not None and b._shared is not None
    kept = await b._durable.claim_lapsed({"web"})
    assert kept is not None
    taken = await b.take_over(kept, OPS)
    assert taken is not None
    runner_a.more.set()  # the first host wakes, its round going on
    await asyncio.sleep(1.0)  # several of its sharing task's copies
    shared = await b._shared.events_after(first.run_id, 0)
    runner_b.go.set()
    await asyncio.wait_for(asyncio.gather(taken.task), 10)
    assert "A late answer from the frozen host." not in str(shared)
    first.task.cancel()
    await asyncio.gather(first.task, return_exceptions=True)


async def test_a_run_stored_before_its_host_died_still_settles_its_askers_budget(hosts) -> None:
    """Finding: the first host stores the turn, then `_end` forgets the durable row and only then calls
    `on_done` (the asker's daily budget settled to the answer's receipt). A host dying between storing and
    forgetting leaves the row; the taker finds the turn stored and returns None (chats/runs.py `take_over`)
    without calling `on_done`: the answer's spending is never counted against the asker's budget (the hold
    only lapses). Safe: a run found stored still settles (with its stored receipt), once."""
    runner_a = StoppingRunner()
    a, b = hosts(runner_a), hosts(StoppingRunner())
    first = await _started_and_stopped(a, runner_a)
    answered = RunResult(question="Which airport?", answer="EWR [Q1].")
    await a._store.save_turn(first.conversation_id, first.run_id, answered, [e.as_dict() for e in first.events])
    # The host dies right after storing, its row not yet forgotten (its task stays frozen: it never runs on).
    assert a._durable is not None
    a._durable._file.now(lambda c: c.execute("UPDATE durable_runs SET lease_until = 1, holder = 'dead'"))
    assert b._durable is not None
    kept = await b._durable.claim_lapsed({"web"})
    assert kept is not None
    settled: list[RunResult] = []

    async def on_done(result: RunResult) -> None:
        settled.append(result)

    assert await b.take_over(kept, OPS, on_done=on_done) is None
    assert len(settled) == 1, "the asker's hold was never settled"


async def test_a_takeover_that_fails_to_start_does_not_leave_the_run_held_forever(hosts, monkeypatch) -> None:
    """Finding: `claim_lapsed` makes this host the holder; when `take_over` then fails (the shared log or the
    reports away for a moment), `watch` logs it and goes on, renewing the lease of a run nobody drives: no
    other host may take it, and its readers wait forever. Safe: a claimed run that could not be started is
    released (its lease lapsed again) or ended with a message."""
    runner_a = StoppingRunner()
    a, b = hosts(runner_a), hosts(StoppingRunner())
    first = await _started_and_stopped(a, runner_a)
    lapse(a)
    assert b._durable is not None and b._shared is not None

    async def away(*args: Any) -> Any:
        raise ConnectionError("the database went away for a moment")

    monkeypatch.setattr(b._shared, "events_after", away)
    kept = await b._durable.claim_lapsed({"web"})
    assert kept is not None
    try:
        handle = await b.take_over(kept, OPS)
    except ConnectionError:
        handle = None
    monkeypatch.undo()
    await b._durable.renew()  # the watcher's next pass
    driven = handle is not None and handle.task is not None
    assert driven or not await b._durable.held_here(first.run_id), "held and renewed, driven by nobody"
    runner_a.more.set()
