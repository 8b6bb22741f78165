"""A run followed from another host on PostgreSQL is pushed to (LISTEN/NOTIFY), not polled: with every timer
of the shared log set to half a minute, each event still reaches the other host's reader while the run goes
on; and a listening connection that is lost is made again, and what was said meanwhile re-read. The notices
carry the events themselves when they fit: such a reader reads no events from the table, and one that meets a
gap (an event too large for a notice) reads it, in order; a quiet reader's check on the owner is its beat."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import psycopg
import pytest

from agent.runner import AnswerEvent, EventSink, RunResult, Turn, ignore_events
from chats import runs as runs_module
from chats.runs import RunEvent, RunRegistry
from chats.shared_runs import CHANNEL, SharedRunLog
from chats.state import ChatState
from chats.state_postgres import CARRIED_MAX, PostgresFile, Woken
from tests.postgres import PostgresServer

pytestmark = pytest.mark.timeout(120)
NEVER_S = 30.0  # every timer of the shared log: a reader that polled would see nothing within a test's wait
WITHIN_S = 10.0


class SteppedRunner:
    """A Runner that publishes one answer piece each time `step` is set, `pieces` in all."""

    def __init__(self, pieces: int, padding: str = "") -> None:
        self.pieces, self.padding = pieces, padding  # `padding` after each piece's text
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
            await on_event(AnswerEvent(text=f"piece {n} {self.padding}"))
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


def _count_calls(state: ChatState, monkeypatch: pytest.MonkeyPatch, *names: str) -> dict[str, int]:
    """Calls of the shared log's methods `names` by `state`'s host, from now on."""
    shared = state.shared_runs
    assert shared is not None
    calls = dict.fromkeys(names, 0)
    for name in names:
        monkeypatch.setattr(shared, name, _counted(getattr(shared, name), calls, name))
    return calls


async def _caught_up(reader: ChatState, followed: AsyncIterator[RunEvent], runner: SteppedRunner) -> None:
    """The reader past the run's start and, once its host listens, its first piece: what woke it before (its
    LISTEN taking effect, the run's opening) has made it read by then."""
    assert (await _next(followed)).name == "started"
    assert reader.shared_runs is not None and reader.shared_runs._notices is not None
    await asyncio.wait_for(reader.shared_runs._notices.listening.wait(), WITHIN_S)
    runner.step.put_nowait(None)
    assert (await _next(followed)).data["text"] == f"piece 0 {runner.padding}"


def _counted(call: Any, calls: dict[str, int], name: str) -> Any:
    async def counted(*args: Any) -> Any:
        calls[name] += 1
        return await call(*args)

    return counted


@pytest.mark.usefixtures("no_timers")
async def test_events_the_notice_carries_reach_a_reader_on_another_host_without_a_read(
    hosts: tuple[ChatState, ChatState], monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, reader = hosts
    runner = SteppedRunner(4, padding="é" * 100)  # not ASCII: the payload's limit is in bytes
    _, run_id = await _started(owner, runner)
    followed = await _follow_elsewhere(reader, run_id)
    await _caught_up(reader, followed, runner)
    calls = _count_calls(reader, monkeypatch, "events_after", "find")
    for n in range(1, 4):
        runner.step.put_nowait(None)
        event = await _next(followed)
        assert (event.id, event.name, event.data["text"]) == (n + 2, "answer", f"piece {n} {runner.padding}")
    assert (await _next(followed)).name == "done"
    assert calls == {"events_after": 0, "find": 0}, "every event came in its notice: no read of the table"


@pytest.mark.usefixtures("no_timers")
async def test_an_event_too_large_for_the_notice_is_read_from_the_table_in_order(
    hosts: tuple[ChatState, ChatState], monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, reader = hosts
    runner = SteppedRunner(4, padding="é" * 4000)  # 8000 bytes and more: over PostgreSQL's payload limit
    _, run_id = await _started(owner, runner)
    followed = await _follow_elsewhere(reader, run_id)
    await _caught_up(reader, followed, runner)
    calls = _count_calls(reader, monkeypatch, "events_after")
    for n in range(1, 4):
        runner.step.put_nowait(None)
        event = await _next(followed)
        assert (event.id, event.data["text"]) == (n + 2, f"piece {n} {runner.padding}")
    assert (await _next(followed)).name == "done"
    assert calls["events_after"] >= 3, "each large event was read from the table"


def test_a_gap_in_the_carried_events_or_a_bare_notice_means_a_read() -> None:
    woken = Woken()
    woken.nudge('[[3,"answer",{"text":"c"}]]')
    assert SharedRunLog.carried(woken, 1) is None, "event 2 was not carried (its notice was too large)"
    woken.nudge('[[1,"started",{}],[2,"answer",{"text":"b"}]]')
    woken.nudge('[[3,"answer",{"text":"c"}]]')
    assert SharedRunLog.carried(woken, 1) == ([(2, "answer", {"text": "b"}), (3, "answer", {"text": "c"})], True)
    assert SharedRunLog.carried(woken, 3) == ([], False), "nothing since: nothing new (a timer woke it)"
    woken.nudge('[[2,"answer",{"text":"b"}]]')
    assert SharedRunLog.carried(woken, 3) == ([], True), "only what the reader had already (from its owner)"
    woken.nudge('[[4,"answer",{"text":"d"}]]')
    woken.nudge()  # a notice without events (a close), or the connection back: what came is unknown
    assert SharedRunLog.carried(woken, 3) is None
    woken.nudge('[[4,"done",{}]]')
    woken.nudge()  # the run's close, after its last copy: nothing after `done` matters
    assert SharedRunLog.carried(woken, 3) == ([(4, "done", {})], True)
    for n in range(CARRIED_MAX + 1):  # a reader that took nothing for long: its notices are dropped
        woken.nudge(f'[[{4 + n},"answer",{{}}]]')
    assert SharedRunLog.carried(woken, 3) is None


@pytest.mark.usefixtures("no_timers")
async def test_a_notice_carries_only_the_events_its_copy_added(hosts: tuple[ChatState, ChatState]) -> None:
    """What a notice carries is what the table has: an event already there (a copy made again) is not carried
    again, whatever data the second copy had."""
    owner, _ = hosts
    log = owner.shared_runs
    assert log is not None
    url = owner.file._url  # type: ignore[union-attr]
    listener = await psycopg.AsyncConnection.connect(url, autocommit=True)
    async with listener:
        await listener.execute(f"LISTEN {CHANNEL}")
        await log.open("run-1", "conversation-1")
        assert await log.add("run-1", [(1, "started", {}), (2, "answer", {"text": "a"})], beat=False)
        assert await log.add("run-1", [(2, "answer", {"text": "other"}), (3, "answer", {"text": "b"})], beat=False)
        payloads = []
        async for notice in listener.notifies(timeout=WITHIN_S, stop_after=3):
            payloads.append(notice.payload)
    assert payloads[0] == "run-1", "the opening: a bare notice"
    carried = [json.loads(payload.partition("\n")[2]) for payload in payloads[1:]]
    assert carried == [[[1, "started", {}], [2, "answer", {"text": "a"}]], [[3, "answer", {"text": "b"}]]]
    assert await log.events_after("run-1", 0) == [(n, name, data) for batch in carried for n, name, data in batch]


async def test_a_quiet_reader_checks_on_the_owner_with_its_heartbeat_alone(
    hosts: tuple[ChatState, ChatState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unwoken on PostgreSQL a reader reads no events (a notice would have said so), and its heartbeat reads the
    run's row in the same round trip: one round trip a check on the owner, where it took three."""
    monkeypatch.setattr(runs_module, "PUSHED_CHECK_S", 0.05)
    owner, reader = hosts
    runner = SteppedRunner(2)
    _, run_id = await _started(owner, runner)
    followed = await _follow_elsewhere(reader, run_id)
    await _caught_up(reader, followed, runner)
    calls = _count_calls(reader, monkeypatch, "events_after", "find", "touch")
    waiting = asyncio.create_task(_next(followed))
    await asyncio.sleep(0.6)  # some ten checks on the owner
    runner.step.put_nowait(None)
    assert (await waiting).name == "answer"
    assert (await _next(followed)).name == "done"
    assert calls["touch"] >= 3, "the reader went on beating"
    assert (calls["events_after"], calls["find"]) == (0, 0), "and its beat was the whole check"


async def test_many_readers_heartbeats_go_in_a_few_round_trips_each_its_own_run(
    hosts: tuple[ChatState, ChatState], monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, reader = hosts
    owner_log, reader_log = owner.shared_runs, reader.shared_runs
    assert owner_log is not None and reader_log is not None
    ids = [f"run-{n}" for n in range(20)]
    for n, run_id in enumerate(ids):
        await owner_log.open(run_id, f"conversation-{n}")
    file = reader.file
    assert isinstance(file, PostgresFile)
    trips: list[object] = []
    run = file.run

    async def counted(fn: Any) -> Any:
        trips.append(fn)
        return await run(fn)

    monkeypatch.setattr(file, "run", counted)
    found = await asyncio.gather(*(reader_log.touch(run_id) for run_id in [*ids, "run-unknown"]))
    expected = [*(f"conversation-{n}" for n in range(20)), None]
    assert [live.conversation_id if live else None for live in found] == expected
    assert all(live.owner_alive for live in found if live), "read by the database's clock"
    assert len(trips) <= 4, f"{len(trips)} round trips for 21 heartbeats"


@pytest.mark.usefixtures("no_timers")
async def test_the_owner_hears_of_a_reader_with_its_first_read(hosts: tuple[ChatState, ChatState]) -> None:
    """The reader's first heartbeat goes with its first read, not after it has handed on what it read: the owner
    copies events as they come (not on its timer) from the reader's first event on."""
    owner, reader = hosts
    runner = SteppedRunner(1)
    _, run_id = await _started(owner, runner)
    followed = await _follow_elsewhere(reader, run_id)
    assert (await _next(followed)).name == "started"  # and the reader asked for nothing more
    assert owner.shared_runs is not None
    watched = owner.shared_runs.watched(run_id)
    assert watched is not None
    await asyncio.wait_for(watched.wait(), WITHIN_S)
    runner.step.put_nowait(None)
    assert [(await _next(followed)).name for _ in range(2)] == ["answer", "done"]


async def test_a_copy_without_a_beat_neither_rewrites_the_runs_row_nor_waits_behind_a_heartbeat(
    hosts: tuple[ChatState, ChatState],
) -> None:
    """A copy locks its run's row against a close (FOR KEY SHARE) rather than updating it: no new row version a
    copy, and a reader's heartbeat holding the row (its transaction not yet committed) does not hold it up."""
    owner, _ = hosts
    log = owner.shared_runs
    assert log is not None
    url = owner.file._url  # type: ignore[union-attr]
    await log.open("run-1", "conversation-1")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        version = await (await conn.execute("SELECT xmin::text FROM live_runs WHERE run_id = 'run-1'")).fetchone()
        assert await log.add("run-1", [(1, "started", {})], beat=False)
        again = await (await conn.execute("SELECT xmin::text FROM live_runs WHERE run_id = 'run-1'")).fetchone()
        assert again == version, "the run's row was not written again"
        async with conn.transaction():  # a reader's heartbeat, under way
            await conn.execute("UPDATE live_runs SET watched_at = watched_at + 1 WHERE run_id = 'run-1'")
            assert await asyncio.wait_for(log.add("run-1", [(2, "answer", {"text": "a"})], beat=False), WITHIN_S / 2)
    assert [number for number, _, _ in await log.events_after("run-1", 0)] == [1, 2]
