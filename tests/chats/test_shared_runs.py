"""A run followed from another host on PostgreSQL is pushed to (LISTEN/NOTIFY), not polled: with every timer
of the shared log set to half a minute, each event still reaches the other host's reader while the run goes
on; and a listening connection that is lost is made again, and what was said meanwhile re-read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import psycopg
import pytest

from agent.runner import AnswerEvent, EventSink, RunResult, Turn, ignore_events
from chats import runs as runs_module
from chats.runs import RunEvent, RunRegistry
from chats.shared_runs import CHANNEL
from chats.state import ChatState
from tests.postgres import PostgresServer

pytestmark = pytest.mark.timeout(120)
NEVER_S = 30.0  # every timer of the shared log: a reader that polled would see nothing within a test's wait
WITHIN_S = 10.0


class SteppedRunner:
    """A Runner that publishes one answer piece each time `step` is set, `pieces` in all."""

    def __init__(self, pieces: int) -> None:
        self.pieces = pieces
        self.step = asyncio.Queue[None]()

    async def run(
        self,
        question: str,
        *,
        history: Sequence[Turn] = (),
        platform: Any = "web",
        interface: Any = "web",
        on_event: EventSink = ignore_events,
        followups: bool = True,
        policy: Any = None,
    ) -> RunResult:
        for n in range(self.pieces):
            await self.step.get()
            await on_event(AnswerEvent(text=f"piece {n} "))
        return RunResult(question=question, answer="done")


@pytest.fixture
def hosts(postgres_server: PostgresServer) -> Iterator[tuple[ChatState, ChatState]]:
    """Two hosts' states on one database."""
    url = postgres_server.new_database()
    owner, reader = ChatState(url), ChatState(url)
    yield owner, reader
    owner.close()
    reader.close()


@pytest.fixture
def no_timers(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SHARED_FLUSH_S", "SHARED_POLL_S", "PUSHED_CHECK_S"):
        monkeypatch.setattr(runs_module, name, NEVER_S, raising=False)


async def _next(events: AsyncIterator[RunEvent]) -> RunEvent:
    return await asyncio.wait_for(anext(events), WITHIN_S)


async def _started(owner: ChatState, runner: SteppedRunner) -> tuple[RunRegistry, str]:
    registry = RunRegistry(runner, owner.conversations, shared=owner.shared_runs)
    conversation = await owner.conversations.create_conversation("hi")
    return registry, registry.start(conversation, "hi", [], platform="web", interface="web").run_id


async def _follow_elsewhere(reader: ChatState, run_id: str) -> AsyncIterator[RunEvent]:
    registry = RunRegistry(SteppedRunner(0), reader.conversations, shared=reader.shared_runs)
    followed = await registry.follow_elsewhere(run_id)
    assert followed is not None, "the other host's run is found"
    return followed


@pytest.mark.usefixtures("no_timers")
async def test_each_event_reaches_a_reader_on_another_host_as_it_happens(hosts: tuple[ChatState, ChatState]) -> None:
    owner, reader = hosts
    runner = SteppedRunner(3)
    _, run_id = await _started(owner, runner)
    followed = await _follow_elsewhere(reader, run_id)
    assert (await _next(followed)).name == "started"
    for n in range(3):  # each piece is published only after the reader saw the one before: it came live
        runner.step.put_nowait(None)
        event = await _next(followed)
        assert (event.name, event.data["text"]) == ("answer", f"piece {n} ")
    assert (await _next(followed)).name == "done"


@pytest.mark.usefixtures("no_timers")
async def test_a_lost_listening_connection_is_made_again_and_nothing_is_missed(
    hosts: tuple[ChatState, ChatState], postgres_server: PostgresServer
) -> None:
    owner, reader = hosts
    runner = SteppedRunner(2)
    _, run_id = await _started(owner, runner)
    followed = await _follow_elsewhere(reader, run_id)
    assert (await _next(followed)).name == "started"
    assert reader.shared_runs is not None
    listening = reader.shared_runs._notices
    assert listening is not None
    await asyncio.wait_for(listening.listening.wait(), WITHIN_S)

    reading = asyncio.create_task(_next(followed))  # waits on the push
    await asyncio.sleep(0.1)
    await asyncio.to_thread(_end_listeners, owner_url(owner))  # its server connection is gone...
    runner.step.put_nowait(None)  # ... while the run goes on
    event = await reading
    assert (event.name, event.data["text"]) == ("answer", "piece 0 ")
    await asyncio.wait_for(listening.listening.wait(), WITHIN_S)  # listening again
    runner.step.put_nowait(None)
    assert (await _next(followed)).data["text"] == "piece 1 "
    assert (await _next(followed)).name == "done"


def owner_url(state: ChatState) -> str:
    return state.file._url  # type: ignore[union-attr]


def _end_listeners(url: str) -> None:
    """The server ends every connection that LISTENs on the runs' channel, as a restart or a network cut."""
    with psycopg.connect(url, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s", (f"LISTEN {CHANNEL}",)
        ).fetchall()
    assert ended, "a listening connection was there to end"


@pytest.mark.usefixtures("no_timers")
async def test_a_run_nobody_elsewhere_follows_is_copied_on_the_owners_timer_until_someone_does(
    hosts: tuple[ChatState, ChatState], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runs_module, "BEAT_S", NEVER_S)  # no heartbeat's copy in between either
    owner, reader = hosts
    runner = SteppedRunner(3)
    registry, run_id = await _started(owner, runner)
    handle, shared = registry.get(run_id), owner.shared_runs
    assert handle is not None and shared is not None and shared._notices is not None
    while not await shared.events_after(run_id, 0):  # the first copy: `started`, as the run opens
        await asyncio.sleep(0.01)
    await asyncio.wait_for(shared._notices.listening.wait(), WITHIN_S)  # the owner hears of a reader
    for _ in range(2):
        runner.step.put_nowait(None)
    while len(handle.events) < 3:  # two pieces published by the owner...
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    copied = await shared.events_after(run_id, 0)
    assert [name for _, name, _ in copied] == ["started"], "... not yet copied: nobody elsewhere reads them"

    followed = await _follow_elsewhere(reader, run_id)  # a reader on another host: now they are pushed
    assert [(await _next(followed)).name for _ in range(3)] == ["started", "answer", "answer"]
    runner.step.put_nowait(None)
    assert [(await _next(followed)).name for _ in range(2)] == ["answer", "done"]
