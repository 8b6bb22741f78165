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
