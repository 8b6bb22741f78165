"""Rate limits and per-conversation turns, in one process (memory) and across worker processes (the
shared state, here opened twice as two workers open it: a SQLite file or a PostgreSQL database)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chats import turns as turns_module
from chats.pacing import Pacing
from chats.rate_limits import LocalRateLimit, RateLimit, SharedRateLimit
from chats.shared_runs import DEAD_AFTER_S
from chats.state import ChatState
from chats.state_file import StateFile


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def files(state_files: Callable[[], StateFile]) -> Callable[[], StateFile]:
    """Connections to the shared state, as each worker has its own; all closed at the end."""
    return state_files


@pytest.fixture
def workers(state_location: Path | str) -> Iterator[Callable[[], Pacing]]:
    """Pacing as each of several workers has it, on one state; all closed at the end."""
    opened: list[ChatState] = []

    def start() -> Pacing:
        opened.append(ChatState(state_location, workers=2))
        return opened[-1].pacing

    yield start
    for state in opened:
        state.close()


@pytest.fixture
def other(state_files: Callable[[], StateFile]) -> StateFile:
    """Another worker's connection to the state, for what the test writes and reads behind the kit's back."""
    return state_files()


def rows(file: StateFile) -> list[tuple[str, int, int]]:
    read = "SELECT key, position, holding FROM thread_turns ORDER BY position"
    found = file.now(lambda c: c.execute(read).fetchall())
    return [tuple(row) for row in found]


# --- rate limits ---


@pytest.fixture(params=["one process", "several workers"])
def make_limit(request: pytest.FixtureRequest, files) -> Callable[[int, Clock], RateLimit]:
    def make(per_minute: int, clock: Clock) -> RateLimit:
        if request.param == "one process":
            return LocalRateLimit(per_minute, clock=clock)
        return SharedRateLimit(files(), "test", per_minute, clock=clock)

    return make


async def test_a_rate_limit_allows_n_a_minute_per_key_and_says_when_to_come_back(make_limit) -> None:
    clock = Clock()
    limit = make_limit(2, clock)
    assert [await limit.take("alice") for _ in range(2)] == [None, None]
    clock.now += 15
    assert await limit.take("alice") == pytest.approx(45)
    assert await limit.take("bob") is None, "each key has its own budget"
    clock.now += 45
    assert [await limit.take("alice") for _ in range(2)] == [None, None], "a refused question is not counted"
    clock.now += 1
    assert await limit.take("alice") == pytest.approx(59)


async def test_workers_share_one_budget_and_never_both_take_the_last_place(workers) -> None:
    first, second = workers(), workers()
    limits = [first.rate_limit("web:questions", 5), second.rate_limit("web:questions", 5)]
    takes = await asyncio.gather(*(limits[i % 2].take("10.0.0.7") for i in range(20)))
    assert sum(wait is None for wait in takes) == 5
    assert all(0 < wait <= 60 for wait in takes if wait is not None)
    assert await first.rate_limit("web:downloads", 5).take("10.0.0.7") is None, "scopes are apart"


async def test_shared_takes_are_forgotten_once_out_of_the_window(files) -> None:
    file, clock = files(), Clock()
    limit = SharedRateLimit(file, "test", 3, clock=clock)
    for key in ("a", "b", "c"):
        await limit.take(key)
    clock.now += 61
    await limit.take("d")
    left = file.now(lambda c: c.execute("SELECT key FROM pace_takes").fetchall())
    assert [tuple(row) for row in left] == [("d",)]


async def test_a_refused_client_is_answered_from_memory_until_its_wait_is_over(files) -> None:
    file, clock = files(), Clock()
    limit = SharedRateLimit(file, "test", 1, clock=clock)
    assert await limit.take("flooder") is None
    assert await limit.take("flooder") == pytest.approx(60)
    file.close()  # nothing reaches the file while the client is refused
    clock.now += 10
    assert await limit.take("flooder") == pytest.approx(50)


async def test_a_clock_stepped_back_does_not_lock_a_client_out(files) -> None:
    file, clock = files(), Clock()
    limit = SharedRateLimit(file, "test", 1, clock=clock)
    assert await limit.take("alice") is None
    clock.now -= 3600
    other = SharedRateLimit(file, "test", 1, clock=clock)  # another worker, with no memory of a refusal
    assert await other.take("alice") is None, "a take from 'the future' no longer counts"
    assert await other.take("alice") == pytest.approx(60)


async def test_a_locked_file_lets_the_request_through_rather_than_fail_it(
    files, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = SharedRateLimit(files(), "test", 1)
    monkeypatch.setattr(limit, "_take", _locked)  # as a file locked past the busy timeout answers
    assert await limit.take("alice") is None


def _locked(key: str, c: sqlite3.Connection) -> float | None:
    raise sqlite3.OperationalError("database is locked")


# --- turns ---


@pytest.fixture(params=["one process", "two workers"])
def pacings(request: pytest.FixtureRequest, workers) -> tuple[Pacing, Pacing]:
    """Two views of the pacing: the same object in one process, or two workers on one file."""
    if request.param == "one process":
        pacing = Pacing()
        return pacing, pacing
    return workers(), workers()


async def test_one_conversation_goes_one_at_a_time_in_order(pacings: tuple[Pacing, Pacing]) -> None:
    order: list[str] = []

    async def answer(pacing: Pacing, name: str, key: str = "thread") -> None:
        async with pacing.turn(key):
            order.append(f"{name} starts")
            await asyncio.sleep(0.3)
            order.append(f"{name} ends")

    first = asyncio.create_task(answer(pacings[0], "1"))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(answer(pacings[1], "2"))
    await asyncio.sleep(0.05)
    third = asyncio.create_task(answer(pacings[0], "3"))
    await asyncio.sleep(0.05)
    other = asyncio.create_task(answer(pacings[1], "other", key="another thread"))
    await asyncio.gather(first, second, third, other)
    mine = [step for step in order if not step.startswith("other")]
    assert mine == ["1 starts", "1 ends", "2 starts", "2 ends", "3 starts", "3 ends"]
    assert order.index("other starts") < order.index("1 ends"), "other conversations go side by side"


async def test_a_waiter_that_is_cancelled_gives_up_its_place(pacings: tuple[Pacing, Pacing]) -> None:
    held, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with pacings[0].turn("thread"):
            held.set()
            await release.wait()

    async def wait_then_note(note: list[str]) -> None:
        async with pacings[1].turn("thread"):
            note.append("ran")

    holder = asyncio.create_task(hold())
    try:
        await held.wait()
        cancelled_note: list[str] = []
        waiter = asyncio.create_task(wait_then_note(cancelled_note))
        await asyncio.sleep(0.2)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    finally:
        release.set()
        await holder
    after: list[str] = []
    await asyncio.wait_for(wait_then_note(after), 5)
    assert cancelled_note == [] and after == ["ran"]


async def test_a_turn_cancelled_as_it_joins_leaves_no_row(workers, other: StateFile) -> None:
    pacing = workers()
    for delay in (0, 0.0005, 0.002):
        entering = asyncio.create_task(_enter_and_leave(pacing, position=1))
        await asyncio.sleep(delay)
        entering.cancel()
        await asyncio.gather(entering, return_exceptions=True)
    for _ in range(100):  # a cancellation that lands as it leaves returns first; the leaving goes on
        if not rows(other):
            break
        await asyncio.sleep(0.02)
    assert rows(other) == []
    await asyncio.wait_for(_enter_and_leave(pacing, position=2), 5)


async def test_the_position_orders_the_line_across_workers(workers, other: StateFile) -> None:
    """Slack messages take their place by ts: of two waiting, the earlier message goes first even if it
    joined later; and one that joins with an earlier ts while another holds the turn waits for it."""
    first, second = workers(), workers()
    order: list[str] = []
    running: list[str] = []
    held, release = asyncio.Event(), asyncio.Event()

    async def answer(pacing: Pacing, name: str, position: int) -> None:
        async with pacing.turn("thread", position=position):
            running.append(name)
            order.append(f"{name} {len(running)} running")
            if name == "B":
                held.set()
                await release.wait()
            else:
                await asyncio.sleep(0.1)
            running.remove(name)

    b = asyncio.create_task(answer(first, "B", 20))
    await held.wait()
    d = asyncio.create_task(answer(second, "D", 40))
    await asyncio.sleep(0.3)
    c = asyncio.create_task(answer(first, "C", 30))
    a = asyncio.create_task(answer(second, "A", 10))  # sent before B, reached its worker after B began
    await asyncio.sleep(0.3)
    assert order == ["B 1 running"], "nobody runs beside the holder, not even an earlier message"
    release.set()
    await asyncio.gather(a, b, c, d)
    assert order == ["B 1 running", "A 1 running", "C 1 running", "D 1 running"]
    assert rows(other) == []


async def test_a_worker_that_dies_holding_the_turn_is_passed_over(workers, other: StateFile) -> None:
    pacing = workers()
    other.now(  # another worker holds the thread's turn and is alive
        lambda c: c.execute("INSERT INTO thread_turns VALUES ('theirs', 'thread', 1, ?, 1)", (time.time(),))
    )
    waiter = asyncio.create_task(asyncio.wait_for(_enter_and_leave(pacing, position=2), 20))
    await asyncio.sleep(0.5)
    assert not waiter.done(), "it waits while the holder beats"
    other.now(  # the holder died: its beats stopped
        lambda c: c.execute("UPDATE thread_turns SET beat_at = ? WHERE token = 'theirs'", (time.time() - DEAD_AFTER_S,))
    )
    await waiter
    assert rows(other) == [], "the dead worker's row was swept as well"


async def test_a_waiter_whose_row_was_swept_for_late_beats_takes_its_place_again(
    workers, other: StateFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stalled worker's waiting row can be taken for dead's; its next beat puts it back, behind the
    holder and in its place."""
    monkeypatch.setattr(turns_module, "BEAT_S", 0.1)
    first, second = workers(), workers()
    held, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with first.turn("thread", position=1):
            held.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    waiter: asyncio.Task[None] | None = None
    try:
        await held.wait()
        waiter = asyncio.create_task(asyncio.wait_for(_enter_and_leave(second, position=2), 20))
        await asyncio.sleep(0.3)
        # as a sweep by a third worker would, after a stall
        other.now(lambda c: c.execute("DELETE FROM thread_turns WHERE position = 2"))
        await asyncio.sleep(0.5)
        assert rows(other) == [("thread", 1, 1), ("thread", 2, 0)], "back in line, behind the holder"
        assert not waiter.done()
    finally:
        release.set()
        await asyncio.gather(holder, *([waiter] if waiter else []))
    assert rows(other) == []


async def _enter_and_leave(pacing: Pacing, position: int) -> None:
    async with pacing.turn("thread", position=position):
        pass
