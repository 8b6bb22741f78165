"""Rate limits and per-conversation turns, in one process (memory) and across worker processes (the
shared SQLite file, here opened twice as two workers open it)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent import pacing as pacing_module
from agent.live_runs import DEAD_AFTER_S
from agent.pacing import SCHEMA, LocalRateLimit, Pacing, RateLimit, SharedRateLimit
from agent.sqlite_file import SqliteFile


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def shared_file(path: Path) -> SqliteFile:
    file = SqliteFile(path)
    file.now(lambda c: c.executescript(SCHEMA))
    return file


@pytest.fixture(params=["local", "shared"])
def make_limit(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[int, Clock], RateLimit]:
    def make(per_minute: int, clock: Clock) -> RateLimit:
        if request.param == "local":
            return LocalRateLimit(per_minute, clock=clock)
        return SharedRateLimit(shared_file(tmp_path / "app.sqlite3"), "test", per_minute, clock=clock)

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


async def test_workers_share_one_budget_and_never_both_take_the_last_place(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite3"
    workers = [Pacing(path), Pacing(path)]
    limits = [worker.rate_limit("web:questions", 5) for worker in workers]
    try:
        takes = await asyncio.gather(*(limits[i % 2].take("10.0.0.7") for i in range(20)))
        assert sum(wait is None for wait in takes) == 5
        assert all(0 < wait <= 60 for wait in takes if wait is not None)
        assert await workers[0].rate_limit("web:downloads", 5).take("10.0.0.7") is None, "scopes are apart"
    finally:
        for worker in workers:
            worker.close()


async def test_shared_takes_are_forgotten_once_out_of_the_window(tmp_path: Path) -> None:
    file, clock = shared_file(tmp_path / "app.sqlite3"), Clock()
    limit = SharedRateLimit(file, "test", 3, clock=clock)
    for key in ("a", "b", "c"):
        await limit.take(key)
    clock.now += 61
    await limit.take("d")
    assert [tuple(row) for row in file.now(lambda c: c.execute("SELECT key FROM pace_takes").fetchall())] == [("d",)]


@pytest.fixture(params=["one process", "two workers"])
def pacings(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Pacing, Pacing]:
    """Two views of the pacing: the same object in one process, or two workers on one file."""
    if request.param == "one process":
        pacing = Pacing()
        return pacing, pacing
    return Pacing(tmp_path / "app.sqlite3"), Pacing(tmp_path / "app.sqlite3")


async def test_one_conversation_goes_one_at_a_time_in_arrival_order(pacings: tuple[Pacing, Pacing]) -> None:
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
    await held.wait()
    cancelled_note: list[str] = []
    waiter = asyncio.create_task(wait_then_note(cancelled_note))
    await asyncio.sleep(0.2)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    release.set()
    await holder
    after: list[str] = []
    await asyncio.wait_for(wait_then_note(after), 5)
    assert cancelled_note == [] and after == ["ran"]


def _rows(path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(path) as conn:
        return list(conn.execute("SELECT key, position FROM thread_turns ORDER BY position"))


async def test_across_workers_the_position_orders_the_line_not_who_joined_first(tmp_path: Path) -> None:
    """Slack messages take their place by ts: one that reached its worker late still goes first."""
    first, second = Pacing(tmp_path / "app.sqlite3"), Pacing(tmp_path / "app.sqlite3")
    order: list[str] = []
    held, release = asyncio.Event(), asyncio.Event()

    async def answer(pacing: Pacing, name: str, position: int) -> None:
        async with pacing.turn("thread", position=position):
            order.append(name)
            if name == "A":
                held.set()
                await release.wait()

    a = asyncio.create_task(answer(first, "A", 1))
    await held.wait()
    c = asyncio.create_task(answer(second, "C", 3))
    await asyncio.sleep(0.2)
    b = asyncio.create_task(answer(first, "B", 2))
    await asyncio.sleep(0.2)
    release.set()
    await asyncio.gather(a, b, c)
    assert order == ["A", "B", "C"]
    assert _rows(tmp_path / "app.sqlite3") == []


async def test_a_worker_that_dies_holding_the_turn_is_passed_over(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "app.sqlite3"
    pacing = Pacing(path)
    with sqlite3.connect(path) as conn:  # another worker holds the thread's turn and is alive
        conn.execute("INSERT INTO thread_turns VALUES ('theirs', 'thread', 1, ?)", (time.time(),))
    try:
        waiter = asyncio.create_task(asyncio.wait_for(_enter_and_leave(pacing, position=2), 20))
        await asyncio.sleep(0.5)
        assert not waiter.done(), "it waits while the holder beats"
        with sqlite3.connect(path) as conn:  # the holder died: its beats stopped
            conn.execute("UPDATE thread_turns SET beat_at = ? WHERE token = 'theirs'", (time.time() - DEAD_AFTER_S,))
        await waiter
    finally:
        pacing.close()
    assert _rows(path) == [], "the dead worker's row was swept as well"


async def test_a_waiter_whose_row_was_swept_for_late_beats_keeps_its_place(tmp_path: Path, monkeypatch) -> None:
    """A stalled worker's rows can be taken for dead; its next beat puts them back where they were."""
    monkeypatch.setattr(pacing_module, "BEAT_S", 0.1)
    path = tmp_path / "app.sqlite3"
    first, second = Pacing(path), Pacing(path)
    held, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with first.turn("thread", position=1):
            held.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await held.wait()
    waiter = asyncio.create_task(asyncio.wait_for(_enter_and_leave(second, position=2), 20))
    await asyncio.sleep(0.3)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM thread_turns")  # as a sweep by a third worker would, after a stall
    await asyncio.sleep(0.5)
    assert _rows(path) == [("thread", 1), ("thread", 2)], "both beats put their rows back in place"
    release.set()
    await asyncio.gather(holder, waiter)
    assert _rows(path) == []


async def _enter_and_leave(pacing: Pacing, position: int) -> None:
    async with pacing.turn("thread", position=position):
        pass


async def test_a_refused_client_is_answered_from_memory_until_its_wait_is_over(tmp_path: Path) -> None:
    file, clock = shared_file(tmp_path / "app.sqlite3"), Clock()
    limit = SharedRateLimit(file, "test", 1, clock=clock)
    assert await limit.take("flooder") is None
    assert await limit.take("flooder") == pytest.approx(60)
    file.close()  # nothing reaches the file while the client is refused
    clock.now += 10
    assert await limit.take("flooder") == pytest.approx(50)


async def test_a_clock_stepped_back_never_asks_for_more_than_the_window(tmp_path: Path) -> None:
    file, clock = shared_file(tmp_path / "app.sqlite3"), Clock()
    limit = SharedRateLimit(file, "test", 1, clock=clock)
    assert await limit.take("alice") is None
    clock.now -= 3600
    other = SharedRateLimit(file, "test", 1, clock=clock)  # another worker, with no memory of the refusal
    assert await other.take("alice") == pytest.approx(60)
