"""Attacks on the notices that carry a run's events to readers on other hosts (chats/shared_runs.py `carried`,
chats/shared_runs_postgres.py's copy): what a notice carries must be exactly what the table holds."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from chats import runs as runs_module
from chats.runs import RunRegistry
from chats.shared_runs import SharedRunLog
from chats.state import ChatState
from tests.chats.test_shared_runs import SteppedRunner
from tests.postgres import PostgresServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def state(postgres_server: PostgresServer) -> Iterator[ChatState]:
    state = ChatState(postgres_server.new_database())
    yield state
    state.close()


def _log(state: ChatState) -> SharedRunLog:
    assert state.shared_runs is not None
    return state.shared_runs


async def _carried_after_copy(log: SharedRunLog, run_id: str, events: list[tuple[int, str, dict[str, Any]]]) -> Any:
    with log.waiting(run_id) as woken:
        await log._notices.listening.wait()  # type: ignore[union-attr]
        await asyncio.sleep(0.05)
        woken.take()
        woken.clear()
        assert await log.add(run_id, events, beat=False)
        await asyncio.wait_for(woken.wait(), 10)
        return log.carried(woken, 0)


TRICKY = [
    "quote \" and ' ",
    "back\\slash \\n \\u0000",
    "nul \u0000 here",
    "new\nline\r\ttab",
    "sep \n[ ], \u2028\u2029",
    "emoji \U0001f600 中文",
    "]\n",
    "\\",
    '"]]',
    "%s %% ?",
]


async def test_quotes_backslashes_nul_newlines_and_unicode_are_carried_as_the_table_holds_them(
    state: ChatState,
) -> None:
    log = _log(state)
    await log.open("r1", "c")
    events = [(n, "answer", {"text": t, "n": [t]}) for n, t in enumerate(TRICKY, 1)]
    got = await _carried_after_copy(log, "r1", events)
    table = await log.events_after("r1", 0)
    assert table == events
    assert got == (events, True)


@pytest.mark.parametrize("size", [7900, 7950, 7960, 7970, 7980, 7990, 8000, 8010])
async def test_an_event_near_the_payload_limit_is_carried_exactly_or_read(state: ChatState, size: int) -> None:
    log = _log(state)
    await log.open("r1", "c")
    events = [(1, "answer", {"text": "é" * (size // 2)})]
    got = await _carried_after_copy(log, "r1", events)
    table = await log.events_after("r1", 0)
    assert table == events
    assert got is None or got == (events, True)


async def test_a_lone_surrogate_in_an_events_text_is_copied_and_carried_as_it_was(state: ChatState) -> None:
    """JSON may name a lone surrogate (a person's question or a model's answer, "\\ud800"), and Python keeps it
    in a str: copied without escaping, it cannot be encoded for the server, so the run's copy failed at every
    flush (its readers on other hosts saw nothing more) and made its group fail with it."""
    log = _log(state)
    await log.open("r1", "c")
    events = [(1, "answer", {"text": "lone \ud800 and \udfff, then é"}), (2, "answer", {"text": "after"})]
    got = await _carried_after_copy(log, "r1", events)
    assert await log.events_after("r1", 0) == events
    assert got == (events, True)


async def test_many_events_in_one_copy_are_read_not_carried(state: ChatState) -> None:
    log = _log(state)
    await log.open("r1", "c")
    events = [(n, "delta", {"text": "x"}) for n in range(1, 600)]
    assert await _carried_after_copy(log, "r1", events) is None  # too large for a notice: a bare one
    assert await log.events_after("r1", 0) == events


@pytest.fixture
def hosts(postgres_server: PostgresServer) -> Iterator[tuple[ChatState, ChatState]]:
    url = postgres_server.new_database()
    owner, reader = ChatState(url), ChatState(url)
    yield owner, reader
    owner.close()
    reader.close()


@pytest.mark.parametrize("units", [10, 200, 990, 1000])
async def test_a_reader_that_takes_nothing_while_200_copies_come_gets_each_once_in_order(
    hosts: tuple[ChatState, ChatState], monkeypatch: pytest.MonkeyPatch, units: int
) -> None:
    """Past 64 notices untaken the waiter drops their data and reads; events near and over the payload limit
    (quotes, backslashes, newlines, two-byte characters) come carried or read, never twice or out of order."""
    for name in ("SHARED_FLUSH_S", "SHARED_POLL_S", "PUSHED_CHECK_S"):
        monkeypatch.setattr(runs_module, name, 3600.0, raising=False)
    owner, reader = hosts
    pieces = 200
    runner = SteppedRunner(pieces, padding='é"\\\n' * units)
    registry = RunRegistry(runner, owner.conversations, shared=owner.shared_runs)
    conversation = await owner.conversations.create_conversation("hi")
    run_id = registry.start(conversation, "hi", [], platform="web", interface="web").run_id
    other = RunRegistry(SteppedRunner(0), reader.conversations, shared=reader.shared_runs)
    followed = await other.follow_elsewhere(run_id)
    assert followed is not None
    seen = [await asyncio.wait_for(anext(followed), 10)]
    for n in range(pieces):
        runner.step.put_nowait(None)
        await asyncio.sleep(0.01 if n % 3 else 0.05)
    async for event in followed:
        seen.append(event)
    ids = [e.id for e in seen]
    assert ids == list(range(1, len(ids) + 1))
    texts = [e.data["text"] for e in seen if e.name == "answer"]
    assert texts == [f"piece {n} " + 'é"\\\n' * units for n in range(pieces)]
    assert seen[-1].name == "done"
    await registry.shutdown()


async def test_two_readers_on_one_host_and_one_joining_late_each_get_the_whole_run(
    hosts: tuple[ChatState, ChatState], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Their heartbeats go in one statement (the run's row once in the batch twice); the late one starts at
    the beginning although the notices before it are gone."""
    for name in ("SHARED_FLUSH_S", "SHARED_POLL_S"):
        monkeypatch.setattr(runs_module, name, 3600.0, raising=False)
    monkeypatch.setattr(runs_module, "PUSHED_CHECK_S", 0.05)
    owner, reader = hosts
    runner = SteppedRunner(20)
    registry = RunRegistry(runner, owner.conversations, shared=owner.shared_runs)
    conversation = await owner.conversations.create_conversation("hi")
    run_id = registry.start(conversation, "hi", [], platform="web", interface="web").run_id
    other = RunRegistry(SteppedRunner(0), reader.conversations, shared=reader.shared_runs)

    async def whole(delay: float) -> list[int]:
        await asyncio.sleep(delay)
        followed = await other.follow_elsewhere(run_id)
        assert followed is not None
        return [event.id async for event in followed]

    readers = [asyncio.create_task(whole(delay)) for delay in (0.0, 0.0, 0.5)]
    for _ in range(20):
        runner.step.put_nowait(None)
        await asyncio.sleep(0.05)
    got = await asyncio.wait_for(asyncio.gather(*readers), 30)
    assert got[0] == got[1] == got[2] == list(range(1, len(got[0]) + 1))
    await registry.shutdown()
