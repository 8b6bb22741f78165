"""Review 3, section 1: the daily budget's claim, questions asked together by one asker spend at most the
budget plus one question's worth, held across midnight, past the reservation's TTL, with a question's
worth bounded by the loop, and with a busy state file."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from agent.receipts import Receipt
from chats.daily_budgets import RESERVATION_TTL_S, DailyBudget, Refusal, Reservation
from chats.state_file import StateFile
from chats.state_postgres import WRITE_LOCK, is_postgres_url

BUDGET, QUESTION = 20_000, 10_000
NOON = dt.datetime(2026, 11, 26, 12, 30, tzinfo=dt.UTC).timestamp()
BEFORE_MIDNIGHT = dt.datetime(2026, 11, 26, 23, 59, 50, tzinfo=dt.UTC).timestamp()


@pytest.fixture
def shared(state_files: Callable[[], StateFile]) -> StateFile:
    """The state the workers share, on SQLite and on PostgreSQL."""
    return state_files()


async def _spent_today(budget: DailyBudget, key: str) -> int:
    return (await budget._read(budget._day(), key)).tokens


@pytest.mark.parametrize("where", ["memory", "shared file"])
async def test_a_question_that_runs_across_midnight_is_not_held_on_the_day_it_spends(
    where: str, shared: StateFile
) -> None:
    """A reservation is held on the day it started (`day = ?` in every read), but its receipt was counted
    on the day it settles. Questions started at 23:59:50 hold nothing on the next day; questions started
    at 00:00:00 then take the whole new budget too, and all of them settled onto the new day."""
    now = [BEFORE_MIDNIGHT]
    file = shared if where == "shared file" else None
    try:
        budget = DailyBudget(
            max_tokens=BUDGET, max_cost_usd=None, question_tokens=QUESTION, file=file, clock=lambda: now[0]
        )
        late = await asyncio.gather(*(budget.reserve("web:1.2.3.4") for _ in range(8)))
        now[0] += 15  # 00:00:05 the next day
        early = await asyncio.gather(*(budget.reserve("web:1.2.3.4") for _ in range(8)))
        ran = [b for b in (*late, *early) if isinstance(b, Reservation)]
        await asyncio.gather(*(budget.settle(b, Receipt(input_tokens=QUESTION)) for b in ran))
        spent = await _spent_today(budget, "web:1.2.3.4")
        held_day = next(b.day for b in late if isinstance(b, Reservation))  # which of the 8 won is the server's
        yesterday = (await budget._read(held_day, "web:1.2.3.4")).tokens
    finally:
        if file is not None:
            file.close()
    assert spent <= BUDGET + QUESTION, f"{len(ran)} questions ran, {spent:,} tokens counted on one day"
    assert yesterday == 2 * QUESTION  # the late ones count on the day they were held


async def test_a_question_running_past_the_reservation_ttl_lets_the_next_ones_overspend() -> None:
    """RESERVATION_TTL_S (1 h) is shorter than a question may run: AGENT_MAX_ROUNDS (10) model calls of
    AGENT_LLM_TIMEOUT_S (120 s) each with AGENT_LLM_MAX_RETRIES (4) retries is 100 minutes of model time
    alone, and nothing ends a run sooner. Once the hold of a running question lapses, the asker's next
    questions reserve the same budget again. (In memory a hold lasts until settled.)"""
    now = [NOON]
    budget = DailyBudget(max_tokens=BUDGET, max_cost_usd=None, question_tokens=QUESTION, clock=lambda: now[0])
    first = [await budget.reserve("u") for _ in range(2)]
    assert all(isinstance(b, Reservation) for b in first)
    now[0] += RESERVATION_TTL_S + 1  # the first two are still running (a slow model)
    second = [await budget.reserve("u") for _ in range(2)]
    ran = [b for b in (*first, *second) if isinstance(b, Reservation)]
    for booked in ran:
        await budget.settle(booked, Receipt(input_tokens=QUESTION))
    spent = await _spent_today(budget, "u")
    assert spent <= BUDGET + QUESTION, f"{len(ran)} questions ran at once, {spent:,} tokens spent"


async def test_a_running_questions_hold_in_the_shared_file_is_renewed_past_the_ttl(shared: StateFile) -> None:
    """The same in the shared file, where holds expire (a dead worker's must): the live worker renews the
    holds of its running questions, so they outlast the TTL; once settled, renewal stops."""
    now = [NOON]
    file = shared
    try:
        budget = DailyBudget(
            max_tokens=BUDGET, max_cost_usd=None, question_tokens=QUESTION, file=file, clock=lambda: now[0],
            renew_every_s=0.01,
        )  # fmt: skip
        first = [await budget.reserve("u") for _ in range(2)]
        assert all(isinstance(b, Reservation) for b in first)
        for _ in range(3):  # three TTLs pass while the two run; the worker renews in between
            now[0] += RESERVATION_TTL_S - 1
            await asyncio.sleep(0.2)
        late = await budget.reserve("u")
        assert isinstance(late, Refusal) and "still being answered" in late.message
        for booked in first:
            await budget.settle(booked, Receipt(input_tokens=1))  # type: ignore[arg-type]
        assert not budget._renewing  # settled holds are no longer renewed
        assert isinstance(await budget.reserve("u"), Reservation)
    finally:
        file.close()


async def test_the_per_question_budget_does_not_bound_what_a_reservation_holds() -> None:
    """A question reserved AGENT_QUESTION_MAX_TOKENS, but the loop may spend past it by one model call
    (checked before each call, a call's input is known only once reported): the hold covers that call too
    (`call_tokens`, the context window plus a call's output). Eight questions at once, each of whose only
    reply reports 60,000 tokens (a long schema in the prompt, under a 50,000 window), under a 20,000
    budget with a 10,000 question budget: a question's worth is 60,000, so they run one at a time."""
    call = 50_000
    budget = DailyBudget(
        max_tokens=BUDGET, max_cost_usd=None, question_tokens=QUESTION, call_tokens=call, clock=lambda: NOON
    )
    booked = await asyncio.gather(*(budget.reserve("u") for _ in range(8)))
    ran = [b for b in booked if isinstance(b, Reservation)]
    await asyncio.gather(*(budget.settle(b, Receipt(input_tokens=60_000)) for b in ran))
    spent = await _spent_today(budget, "u")
    assert len(ran) == 1
    assert spent <= BUDGET + QUESTION + call, f"{len(ran)} questions ran at once, {spent:,} tokens spent"
    # A small window: the worth fits the budget twice, and two run at once, no more.
    small = DailyBudget(
        max_tokens=BUDGET * 4, max_cost_usd=None, question_tokens=QUESTION, call_tokens=call, clock=lambda: NOON
    )
    booked = await asyncio.gather(*(small.reserve("u") for _ in range(8)))
    assert sum(isinstance(b, Reservation) for b in booked) == 2


async def test_a_busy_state_file_does_not_turn_the_daily_budget_off(
    shared: StateFile, state_location: Path | str
) -> None:
    """`reserve` caught sqlite3.OperationalError and let the question through with no hold (`id` None),
    and `spend` then dropped the receipt the same way: while the shared file is busy past its 10 s timeout
    (another worker's long write, a backup holding a lock), and for every other OperationalError: disk
    full, a read-only file, a missing table, every question of every asker ran, none counted. On
    PostgreSQL, another host holds the write lock past the same wait."""
    file = shared
    with _write_lock_held(state_location):
        budget = DailyBudget(
            max_tokens=QUESTION, max_cost_usd=None, question_tokens=QUESTION, file=file, clock=lambda: NOON
        )
        booked = await asyncio.gather(*(budget.reserve("u") for _ in range(2)))  # each waits 10 s
    ran = [b for b in booked if isinstance(b, Reservation)]
    assert len(ran) <= 1, f"{len(ran)} of 2 questions ran at once under a budget that fits one"
    refused = [b for b in booked if isinstance(b, Refusal)]
    assert refused and all("ask again" in r.message and r.retry_after_s <= 60 for r in refused)


@contextmanager
def _write_lock_held(location: Path | str) -> Iterator[None]:
    """Another process holds the state's write lock meanwhile."""
    if is_postgres_url(location):
        with psycopg.connect(str(location), autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (WRITE_LOCK,))
            yield
        return
    blocker = sqlite3.connect(location, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        blocker.rollback()
        blocker.close()


async def test_a_broken_state_file_refuses_instead_of_letting_questions_through(shared: StateFile) -> None:
    file = shared
    file.now(lambda c: c.execute("DROP TABLE budget_reserved"))  # any OperationalError, not only busy
    try:
        budget = DailyBudget(max_tokens=BUDGET, max_cost_usd=None, file=file, clock=lambda: NOON)
        booked = await budget.reserve("u")
        told = await budget.refusal("u")
    finally:
        file.close()
    assert isinstance(booked, Refusal) and "ask again" in booked.message
    assert isinstance(told, Refusal)
