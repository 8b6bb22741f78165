"""Rate limits and per-conversation turns, in one process (memory) and across worker processes (the
shared SQLite file, here opened twice as two workers open it)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

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


async def test_a_turn_held_by_a_dead_worker_is_passed_over(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite3"
    pacing = Pacing(path)
    with sqlite3.connect(path) as conn:  # a worker that took the turn, then died: its beat stopped long ago
        conn.execute("INSERT INTO turn_tickets (key, beat_at) VALUES ('thread', ?)", (time.time() - DEAD_AFTER_S - 1,))
    try:
        async with asyncio.timeout(5), pacing.turn("thread"):
            pass
    finally:
        pacing.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM turn_tickets").fetchone() == (0,), "nothing is left behind"
