"""The daily budget of one asker: counted from receipts, refused politely once spent with when it
resets, shared by the workers through the app's SQLite file, and the next UTC day starts afresh."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable

import pytest

from agent.receipts import Receipt
from chats.daily_budgets import RESERVATION_TTL_S, DailyBudget, Refusal, Reservation
from chats.state_file import StateFile

NOON = dt.datetime(2026, 11, 26, 12, 30, tzinfo=dt.UTC).timestamp()


def receipt(tokens: int, cost: float | None = 0.01) -> Receipt:
    return Receipt(input_tokens=tokens, cost_usd=cost)


async def test_the_answer_that_crosses_the_budget_is_the_last_until_midnight() -> None:
    now = [NOON]
    budget = DailyBudget(max_tokens=1000, max_cost_usd=None, clock=lambda: now[0])
    assert await budget.refusal("web:1.2.3.4") is None
    await budget.spend("web:1.2.3.4", receipt(600))
    assert await budget.refusal("web:1.2.3.4") is None
    await budget.spend("web:1.2.3.4", receipt(600))
    refusal = await budget.refusal("web:1.2.3.4")
    assert refusal is not None and refusal.retry_after_s == 11 * 3600 + 30 * 60
    assert refusal.message == (
        "You have used today's budget for questions (1,200 of 1,000 tokens). It resets at 00:00 UTC, in 11 h 30 min."
    )
    assert await budget.refusal("web:5.6.7.8") is None  # another asker
    now[0] += 12 * 3600  # the next UTC day
    assert await budget.refusal("web:1.2.3.4") is None


async def test_a_cost_budget_counts_the_estimate() -> None:
    budget = DailyBudget(max_tokens=None, max_cost_usd=0.05, clock=lambda: NOON)
    await budget.spend("u", receipt(10, cost=0.06))
    refusal = await budget.refusal("u")
    assert refusal is not None and "$0.06 of $0.05" in refusal.message


async def test_off_by_default_and_workers_share_the_spending(shared: StateFile) -> None:
    off = DailyBudget(max_tokens=None, max_cost_usd=None)
    await off.spend("u", receipt(10**9))
    assert not off.enabled and await off.refusal("u") is None
    file = shared
    try:
        one, two = (DailyBudget(max_tokens=100, max_cost_usd=None, file=file, clock=lambda: NOON) for _ in range(2))
        await one.spend("slack:T1:U1", receipt(60))
        await two.spend("slack:T1:U1", receipt(60))
        assert await one.refusal("slack:T1:U1") is not None and await two.refusal("slack:T1:U1") is not None
    finally:
        file.close()


async def test_the_budget_is_spent_at_exactly_its_size() -> None:
    """The boundary: spending exactly the budget spends it (a `>` would let one more question through)."""
    budget = DailyBudget(max_tokens=1000, max_cost_usd=0.05, clock=lambda: NOON)
    await budget.spend("u", receipt(999, cost=0.0))
    assert await budget.refusal("u") is None
    await budget.spend("u", receipt(1, cost=0.0))
    refusal = await budget.refusal("u")
    assert refusal is not None and "1,000 of 1,000 tokens" in refusal.message
    cost = DailyBudget(max_tokens=None, max_cost_usd=0.05, clock=lambda: NOON)
    await cost.spend("u", receipt(1, cost=0.05))
    assert await cost.refusal("u") is not None


async def test_cache_writes_count_against_the_budget() -> None:
    """Writing the prompt cache is billed (1.25x input): tokens of every kind count."""
    budget = DailyBudget(max_tokens=1000, max_cost_usd=None, clock=lambda: NOON)
    await budget.spend("u", Receipt(cache_creation_tokens=1000))
    assert await budget.refusal("u") is not None
    for kind in ("input_tokens", "output_tokens", "cache_read_tokens"):
        one = DailyBudget(max_tokens=1000, max_cost_usd=None, clock=lambda: NOON)
        await one.spend("u", Receipt(**{kind: 1000}))
        assert await one.refusal("u") is not None, kind


@pytest.fixture
def shared(state_files: Callable[[], StateFile]) -> StateFile:
    """The state the workers share, on SQLite and on PostgreSQL."""
    return state_files()


async def _ask_at_once(budget: DailyBudget, key: str, questions: int, cost: int) -> tuple[int, int]:
    """`questions` started together by one asker; each that is let in spends `cost` tokens once all have
    started. Returns how many ran and what they spent."""
    booked = await asyncio.gather(*(budget.reserve(key) for _ in range(questions)))
    ran = [b for b in booked if isinstance(b, Reservation)]
    await asyncio.gather(*(budget.settle(b, receipt(cost)) for b in ran))
    return len(ran), cost * len(ran)


@pytest.mark.parametrize("where", ["memory", "shared file"])
async def test_questions_asked_at_once_spend_at_most_the_budget_and_one_question(where: str, shared: StateFile) -> None:
    """The race: eight questions asked at once by an asker whose budget fits two all ran, since spending
    was counted only at the end. Each question reserves its worth when it starts."""
    file = shared if where == "shared file" else None
    try:
        # A per-question budget bounds a question: as many run at once as the budget fits.
        capped = DailyBudget(
            max_tokens=20_000, max_cost_usd=None, question_tokens=10_000, file=file, clock=lambda: NOON
        )
        ran, spent = await _ask_at_once(capped, "web:5.6.7.8", 8, cost=9_000)
        assert ran == 2 and spent <= 20_000 + 10_000
        # Nothing bounds a question: they run one at a time.
        other = DailyBudget(max_tokens=20_000, max_cost_usd=None, file=file, clock=lambda: NOON)
        ran, spent = await _ask_at_once(other, "web:1.2.3.4", 8, cost=9_000)
        assert ran == 1
        first = await other.reserve("web:1.2.3.4")
        assert isinstance(first, Reservation)  # the first finished: the next may start
        busy = await other.reserve("web:1.2.3.4")
        assert isinstance(busy, Refusal) and "still being answered" in busy.message and busy.retry_after_s < 60
        await other.settle(first, receipt(12_000))  # crosses the budget: answered, the next is refused
        spent_out = await other.reserve("web:1.2.3.4")
        assert isinstance(spent_out, Refusal) and "21,000 of 20,000 tokens" in spent_out.message
    finally:
        if file is not None:
            file.close()


async def test_a_reservation_is_released_when_nothing_was_spent_and_expires_when_never_settled(
    shared: StateFile,
) -> None:
    now = [NOON]
    file = shared
    try:
        # A worker that died renews nothing: here, one whose renewal never comes round.
        budget = DailyBudget(max_tokens=1000, max_cost_usd=None, file=file, clock=lambda: now[0], renew_every_s=1e9)
        held = await budget.reserve("u")
        assert isinstance(held, Reservation) and isinstance(await budget.reserve("u"), Refusal)
        await budget.settle(held, None)  # no run started
        again = await budget.reserve("u")
        assert isinstance(again, Reservation)
        now[0] += RESERVATION_TTL_S + 1  # its worker died mid-answer: the hold lapses
        assert isinstance(await budget.reserve("u"), Reservation)
    finally:
        file.close()


async def test_a_cost_budget_holds_what_is_left_while_a_question_runs() -> None:
    budget = DailyBudget(max_tokens=None, max_cost_usd=1.0, clock=lambda: NOON)
    held = await budget.reserve("u")
    assert isinstance(held, Reservation) and isinstance(await budget.reserve("u"), Refusal)
    await budget.settle(held, receipt(10, cost=0.2))
    assert isinstance(await budget.reserve("u"), Reservation)


async def test_off_means_no_hold() -> None:
    off = DailyBudget(max_tokens=None, max_cost_usd=None)
    booked = [await off.reserve("u") for _ in range(3)]
    assert all(isinstance(b, Reservation) and b.id is None for b in booked)


async def test_a_report_holds_its_own_token_budget_whichever_bound_is_less() -> None:
    """A report run is bounded by its token budget and the per-question one, whichever is less: it holds
    that (plus one call), not one question's worth nor all that is left."""
    budget = DailyBudget(max_tokens=20_000, max_cost_usd=None, call_tokens=1_000, clock=lambda: NOON)
    held = [await budget.reserve("slack:T:U", run_tokens=4_000) for _ in range(5)]
    assert sum(isinstance(h, Reservation) for h in held) == 4  # 4 x 5,000 fills the 20,000
    capped = DailyBudget(
        max_tokens=20_000, max_cost_usd=None, question_tokens=9_000, call_tokens=1_000, clock=lambda: NOON
    )
    held = [await capped.reserve("slack:T:U", run_tokens=500_000) for _ in range(3)]
    assert sum(isinstance(h, Reservation) for h in held) == 2  # the per-question bound is the smaller


async def test_a_hold_whose_state_is_closed_stops_renewing_quietly(shared: StateFile) -> None:
    """Shutting down closes the state while a question's hold still renews: its renewal ends by itself (the
    hold expires), not with an exception asyncio reports as never retrieved, on a later test's output."""
    budget = DailyBudget(max_tokens=1000, max_cost_usd=None, file=shared, clock=lambda: NOON, renew_every_s=0.05)
    held = await budget.reserve("u")
    assert isinstance(held, Reservation)
    [renewal] = budget._renewing.values()
    shared.close()
    await asyncio.wait_for(renewal, 10)  # it ends on its own, without raising
    assert renewal.exception() is None
