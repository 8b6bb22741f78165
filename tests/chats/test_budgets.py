"""The daily budget of one asker: counted from receipts, refused politely once spent with when it
resets, shared by the workers through the app's SQLite file, and the next UTC day starts afresh."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from agent.receipts import Receipt
from chats.budgets import DailyBudget
from chats.schema import migrate
from chats.state_file import SqliteFile

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


async def test_off_by_default_and_workers_share_the_spending(tmp_path: Path) -> None:
    off = DailyBudget(max_tokens=None, max_cost_usd=None)
    await off.spend("u", receipt(10**9))
    assert not off.enabled and await off.refusal("u") is None
    file = SqliteFile(tmp_path / "state.sqlite3")
    file.now(migrate)
    try:
        one, two = (DailyBudget(max_tokens=100, max_cost_usd=None, file=file, clock=lambda: NOON) for _ in range(2))
        await one.spend("slack:T1:U1", receipt(60))
        await two.spend("slack:T1:U1", receipt(60))
        assert await one.refusal("slack:T1:U1") is not None and await two.refusal("slack:T1:U1") is not None
    finally:
        file.close()
