"""What one asker (a web client, a Slack user) may spend per UTC day: tokens and estimated cost, from each
answer's receipt (AGENT_DAILY_USER_TOKENS, AGENT_DAILY_USER_COST_USD; off by default).

Like the rate limits, the spending is counted in memory in one process and in the app's SQLite file when
the process is one of several workers, so an asker's budget holds whichever worker a question reaches.

A question reserves its worth when it starts (`reserve`) and settles to its receipt when it ends
(`settle`): counting only finished answers let eight questions asked at once all start under a budget that
fit two. A question's worth is the per-question token budget (AGENT_QUESTION_MAX_TOKENS) when one is set;
otherwise nothing bounds a question, so it reserves all that is left and the asker's questions run one at
a time. Either way, questions asked together spend at most the budget plus one question's worth. The
question that crosses the budget is answered; the next one is refused, saying when the day resets.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from agent.receipts import Receipt
from chats.state_file import SqliteFile, write_transaction

log = logging.getLogger(__name__)

MAX_LOCAL_KEYS = 10_000
# A reservation that was never settled (its worker died mid-answer) stops counting after this long.
RESERVATION_TTL_S = 3600.0
BUSY_RETRY_S = 10  # what a refusal for questions still running tells the client to wait


@dataclass(frozen=True)
class Refusal:
    message: str
    retry_after_s: int


@dataclass(frozen=True)
class Reservation:
    """A started question's hold on its asker's budget, until `settle`. `id` None: no budget is set."""

    key: str
    id: str | None
    day: str = ""


@dataclass(frozen=True)
class _Spent:
    tokens: int
    cost: float
    reserved_tokens: int = 0
    reserved_cost: float = 0.0


class DailyBudget:
    def __init__(
        self,
        *,
        max_tokens: int | None,
        max_cost_usd: float | None,
        question_tokens: int | None = None,
        file: SqliteFile | None = None,
        clock: Callable[[], float] = time.time,  # wall time: the day is UTC's, and workers share it
    ) -> None:
        self.max_tokens, self.max_cost_usd = max_tokens, max_cost_usd
        self.question_tokens = question_tokens
        self._file, self._clock = file, clock
        self._local: dict[tuple[str, str], tuple[int, float]] = {}
        self._held: dict[str, tuple[str, str, int, float, float]] = {}  # id -> day, key, tokens, cost, expires

    @property
    def enabled(self) -> bool:
        return self.max_tokens is not None or self.max_cost_usd is not None

    async def refusal(self, key: str) -> Refusal | None:
        """None when `key` has budget left today (reservations aside); otherwise what to tell them."""
        if not self.enabled:
            return None
        return self._spent_refusal(await self._read(self._day(), key))

    async def reserve(self, key: str) -> Reservation | Refusal:
        """Hold one question's worth of `key`'s budget, or say why not (the day's budget is spent, or the
        questions still running may spend what is left). Every reservation is settled (`settle`)."""
        if not self.enabled:
            return Reservation(key, None)
        held_id, day = uuid.uuid4().hex, self._day()
        reservation = Reservation(key, held_id, day)
        if self._file is None:
            decision = self._decide(self._local_spent(day, key))
            if isinstance(decision, Refusal):
                return decision
            self._held[held_id] = (day, key, *decision, self._clock() + RESERVATION_TTL_S)
            return reservation
        try:
            return await self._file.run(partial(_reserve, reservation, self._clock(), self._decide))
        except sqlite3.OperationalError:  # the shared file is busy: let the question through, say so
            log.warning("could not reserve an asker's daily budget; letting the question through", exc_info=True)
            return Reservation(key, None)

    async def settle(self, reservation: Reservation, receipt: Receipt | None) -> None:
        """End `reservation`: its hold is released and the receipt (None: nothing was spent) is counted.
        Settling twice counts the receipt twice but releases once."""
        if reservation.id is not None:
            if self._file is None:
                self._held.pop(reservation.id, None)
            else:
                try:
                    await self._file.run(partial(_release, reservation.id))
                except sqlite3.OperationalError:
                    log.warning("could not release a daily budget reservation (it expires)", exc_info=True)
        await self.spend(reservation.key, receipt)

    async def spend(self, key: str, receipt: Receipt | None) -> None:
        """Count one answer's receipt against `key`'s day (the cost of unpriced models counts as 0)."""
        if not self.enabled or receipt is None:
            return
        tokens = receipt.input_tokens + receipt.output_tokens + receipt.cache_read_tokens
        tokens += receipt.cache_creation_tokens
        cost = receipt.cost_usd or 0.0
        day = self._day()
        if self._file is None:
            spent_tokens, spent_cost = self._local.get((day, key), (0, 0.0))
            self._local[(day, key)] = (spent_tokens + tokens, spent_cost + cost)
            if len(self._local) > MAX_LOCAL_KEYS:
                self._local = {k: v for k, v in self._local.items() if k[0] == day}
            return
        try:
            await self._file.run(partial(_add, day, key, tokens, cost))
        except sqlite3.OperationalError:
            log.warning("could not count an answer against its asker's daily budget", exc_info=True)

    def _decide(self, spent: _Spent) -> Refusal | tuple[int, float]:
        """A refusal, or the tokens and cost a question starting now holds."""
        if refusal := self._spent_refusal(spent):
            return refusal
        tokens_left = self.max_tokens - spent.tokens if self.max_tokens is not None else 0
        cost_left = self.max_cost_usd - spent.cost if self.max_cost_usd is not None else 0.0
        if (self.max_tokens is not None and spent.reserved_tokens >= tokens_left) or (
            self.max_cost_usd is not None and spent.reserved_cost >= cost_left
        ):
            message = (
                "Your questions still being answered may use the rest of today's budget; ask again when they "
                "have finished."
            )
            return Refusal(message, BUSY_RETRY_S)
        worth = min(self.question_tokens, tokens_left) if self.question_tokens is not None else tokens_left
        return worth, cost_left  # nothing bounds a question's cost: it holds all that is left

    def _spent_refusal(self, spent: _Spent) -> Refusal | None:
        over = []
        if self.max_tokens is not None and spent.tokens >= self.max_tokens:
            over.append(f"{spent.tokens:,} of {self.max_tokens:,} tokens")
        if self.max_cost_usd is not None and spent.cost >= self.max_cost_usd:
            over.append(f"${spent.cost:.2f} of ${self.max_cost_usd:.2f}")
        if not over:
            return None
        now = dt.datetime.fromtimestamp(self._clock(), dt.UTC)
        midnight = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.UTC)
        wait_s = max(1, math.ceil((midnight - now).total_seconds()))
        hours, minutes = divmod(math.ceil(wait_s / 60), 60)
        message = (
            f"You have used today's budget for questions ({' and '.join(over)}). It resets at 00:00 UTC, "
            f"in {hours} h {minutes} min."
        )
        return Refusal(message, wait_s)

    def _local_spent(self, day: str, key: str) -> _Spent:
        tokens, cost = self._local.get((day, key), (0, 0.0))
        now = self._clock()
        self._held = {i: held for i, held in self._held.items() if held[4] > now and held[0] == day}
        mine = [held for held in self._held.values() if held[1] == key]
        return _Spent(tokens, cost, sum(h[2] for h in mine), sum(h[3] for h in mine))

    async def _read(self, day: str, key: str) -> _Spent:
        if self._file is None:
            return self._local_spent(day, key)
        try:
            return await self._file.run(partial(_read_spent, day, key, self._clock()))
        except sqlite3.OperationalError:  # the shared file is busy: let the question through, say so
            log.warning("could not read an asker's daily budget; letting the question through", exc_info=True)
            return _Spent(0, 0.0)

    def _day(self) -> str:
        return dt.datetime.fromtimestamp(self._clock(), dt.UTC).date().isoformat()


def _read_spent(day: str, key: str, now: float, c: sqlite3.Connection) -> _Spent:
    row = c.execute("SELECT tokens, cost_usd FROM budget_spend WHERE day = ? AND key = ?", (day, key)).fetchone()
    held = c.execute(
        "SELECT coalesce(sum(tokens), 0), coalesce(sum(cost_usd), 0.0) FROM budget_reserved "
        "WHERE day = ? AND key = ? AND expires > ?",
        (day, key, now),
    ).fetchone()
    tokens, cost = (int(row[0]), float(row[1])) if row else (0, 0.0)
    return _Spent(tokens, cost, int(held[0]), float(held[1]))


def _reserve(
    reservation: Reservation,
    now: float,
    decide: Callable[[_Spent], Refusal | tuple[int, float]],
    c: sqlite3.Connection,
) -> Reservation | Refusal:
    """Read and hold in one write transaction, so two workers never both take the last of a budget."""
    with write_transaction(c):
        c.execute("DELETE FROM budget_reserved WHERE day < ? OR expires <= ?", (reservation.day, now))
        decision = decide(_read_spent(reservation.day, reservation.key, now, c))
        if isinstance(decision, Refusal):
            return decision
        c.execute(
            "INSERT INTO budget_reserved VALUES (?, ?, ?, ?, ?, ?)",
            (reservation.id, reservation.day, reservation.key, *decision, now + RESERVATION_TTL_S),
        )
    return reservation


def _release(reservation_id: str, c: sqlite3.Connection) -> None:
    c.execute("DELETE FROM budget_reserved WHERE id = ?", (reservation_id,))


def _add(day: str, key: str, tokens: int, cost: float, c: sqlite3.Connection) -> None:
    with write_transaction(c):
        c.execute("DELETE FROM budget_spend WHERE day < ?", (day,))
        c.execute(
            "INSERT INTO budget_spend VALUES (?, ?, ?, ?) ON CONFLICT (day, key) DO UPDATE SET "
            "tokens = tokens + excluded.tokens, cost_usd = cost_usd + excluded.cost_usd",
            (day, key, tokens, cost),
        )
