"""What one asker (a web client, a Slack user) may spend per UTC day: tokens and estimated cost, from each
answer's receipt (AGENT_DAILY_USER_TOKENS, AGENT_DAILY_USER_COST_USD; off by default).

Like the rate limits, the spending is counted in memory in one process and in the app's SQLite file when
the process is one of several workers, so an asker's budget holds whichever worker a question reaches.

A question reserves its worth when it starts (`reserve`) and settles to its receipt when it ends
(`settle`): counting only finished answers let eight questions asked at once all start under a budget that
fit two. A question's worth is what it can spend at most: the loop checks the per-question token budget
(AGENT_QUESTION_MAX_TOKENS) before every model call and calls no more once it is spent, so a question
spends at most that budget plus what one call can add past the check (`call_tokens`: the context window
plus the output tokens of one call, since a call's input is only known once it is reported). With no
per-question budget nothing bounds a question, so it reserves all that is left and the asker's questions
run one at a time. Either way, questions asked together spend at most the budget plus one question's
worth. The question that crosses the budget is answered; the next one is refused, saying when it resets.

A hold and its receipt count on the day the question started. Holds in memory last until settled (they
die with their process); holds in the shared file expire after RESERVATION_TTL_S unless their process
renews them, which it does while the question runs, so only a dead worker's holds lapse. When the budget
cannot be read or held (the shared file stays busy past SQLite's own retrying, or is broken), the question
is refused: a budget that turns itself off under load is no budget.
"""

from __future__ import annotations

import asyncio
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
from chats.state_file import STATE_UNAVAILABLE, StateFile, write_transaction

log = logging.getLogger(__name__)

MAX_LOCAL_KEYS = 10_000
# A reservation in the shared file that was never settled (its worker died mid-answer) stops counting
# after this long; a live worker renews its running questions' holds every RENEW_EVERY_S.
RESERVATION_TTL_S = 3600.0
RENEW_EVERY_S = RESERVATION_TTL_S / 4
BUSY_RETRY_S = 10  # what a refusal for questions still running tells the client to wait
UNREADABLE = (
    "Today's budget for questions could not be checked just now (the server is busy); ask again in a few seconds."
)


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
        call_tokens: int = 0,
        file: StateFile | None = None,
        clock: Callable[[], float] = time.time,  # wall time: the day is UTC's, and workers share it
        renew_every_s: float = RENEW_EVERY_S,
    ) -> None:
        """`call_tokens`: what one model call can add past the per-question check (context window plus
        output tokens); a question holds `question_tokens` plus that."""
        self.max_tokens, self.max_cost_usd = max_tokens, max_cost_usd
        self.question_tokens, self.call_tokens = question_tokens, call_tokens
        self._file, self._clock, self._renew_every_s = file, clock, renew_every_s
        self._local: dict[tuple[str, str], tuple[int, float]] = {}
        self._held: dict[str, tuple[str, str, int, float]] = {}  # id -> day, key, tokens, cost
        self._renewing: dict[str, asyncio.Task[None]] = {}

    @property
    def enabled(self) -> bool:
        return self.max_tokens is not None or self.max_cost_usd is not None

    async def refusal(self, key: str) -> Refusal | None:
        """None when `key` has budget left today (reservations aside); otherwise what to tell them."""
        if not self.enabled:
            return None
        try:
            return self._spent_refusal(await self._read(self._day(), key))
        except STATE_UNAVAILABLE:
            log.warning("could not read an asker's daily budget; refusing the question", exc_info=True)
            return Refusal(UNREADABLE, BUSY_RETRY_S)

    async def reserve(self, key: str, *, run_tokens: int | None = None) -> Reservation | Refusal:
        """Hold one question's worth of `key`'s budget, or say why not (the day's budget is spent, or the
        questions still running may spend what is left). Every reservation is settled (`settle`).
        `run_tokens`: a report's token budget, which bounds it with the per-question one (whichever is less)."""
        if not self.enabled:
            return Reservation(key, None)
        decide = partial(self._decide, run_tokens=run_tokens)
        held_id, day = uuid.uuid4().hex, self._day()
        reservation = Reservation(key, held_id, day)
        if self._file is None:
            decision = decide(self._local_spent(day, key))
            if isinstance(decision, Refusal):
                return decision
            self._held[held_id] = (day, key, *decision)
            return reservation
        try:
            booked = await self._file.run(partial(_reserve, reservation, self._clock(), decide))
        except STATE_UNAVAILABLE:  # busy past SQLite's own retrying, or broken: refuse, say so
            log.warning("could not reserve an asker's daily budget; refusing the question", exc_info=True)
            return Refusal(UNREADABLE, BUSY_RETRY_S)
        if isinstance(booked, Reservation):
            self._renewing[held_id] = asyncio.create_task(self._renew(held_id))
        return booked

    async def settle(self, reservation: Reservation, receipt: Receipt | None) -> None:
        """End `reservation`: the receipt (None: nothing was spent) is counted on the day the question
        started, and its hold is released. Settling twice counts the receipt twice but releases once."""
        if reservation.id is None:
            return
        if renewing := self._renewing.pop(reservation.id, None):
            renewing.cancel()
        tokens, cost = _counted(receipt)
        if self._file is None:
            self._held.pop(reservation.id, None)
            self._add_local(reservation.day, reservation.key, tokens, cost)
            return
        try:
            await self._file.run(partial(_settle, reservation, tokens, cost))
        except STATE_UNAVAILABLE:  # the hold stays and counts until it expires
            log.warning("could not count an answer against its asker's daily budget", exc_info=True)

    async def spend(self, key: str, receipt: Receipt | None) -> None:
        """Count one answer's receipt against `key`'s day (the cost of unpriced models counts as 0)."""
        if not self.enabled or receipt is None:
            return
        tokens, cost = _counted(receipt)
        if self._file is None:
            self._add_local(self._day(), key, tokens, cost)
        else:
            await self._file.run(partial(_add, self._day(), key, tokens, cost))

    async def _renew(self, held_id: str) -> None:
        """Keep a running question's hold in the shared file from expiring, until it is settled."""
        while True:
            await asyncio.sleep(self._renew_every_s)
            try:
                await self._file.run(partial(_renew, held_id, self._clock() + RESERVATION_TTL_S))  # type: ignore[union-attr]
            except STATE_UNAVAILABLE:  # the next renewal tries again
                continue
            except (RuntimeError, sqlite3.ProgrammingError):  # the state was closed (shutting down): the hold expires
                log.debug("stopped renewing a daily-budget hold: the state is closed")
                return

    def _add_local(self, day: str, key: str, tokens: int, cost: float) -> None:
        spent_tokens, spent_cost = self._local.get((day, key), (0, 0.0))
        self._local[(day, key)] = (spent_tokens + tokens, spent_cost + cost)
        if len(self._local) > MAX_LOCAL_KEYS:
            today = self._day()
            self._local = {k: v for k, v in self._local.items() if k[0] >= today}

    def _decide(self, spent: _Spent, run_tokens: int | None = None) -> Refusal | tuple[int, float]:
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
        worth = tokens_left
        bounds = [t for t in (self.question_tokens, run_tokens) if t is not None]
        if bounds:  # a run spends at most its bound plus one call past the check
            worth = min(min(bounds) + self.call_tokens, tokens_left)
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
        mine = [held for held in self._held.values() if held[1] == key and held[0] == day]
        return _Spent(tokens, cost, sum(h[2] for h in mine), sum(h[3] for h in mine))

    async def _read(self, day: str, key: str) -> _Spent:
        if self._file is None:
            return self._local_spent(day, key)
        return await self._file.run(partial(_read_spent, day, key, self._clock()))

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


def _renew(reservation_id: str, expires: float, c: sqlite3.Connection) -> None:
    c.execute("UPDATE budget_reserved SET expires = ? WHERE id = ? AND expires < ?", (expires, reservation_id, expires))


def _settle(reservation: Reservation, tokens: int, cost: float, c: sqlite3.Connection) -> None:
    """Count the receipt on the reservation's day and release its hold, both or neither."""
    with write_transaction(c):
        _count(reservation.day, reservation.key, tokens, cost, c)
        c.execute("DELETE FROM budget_reserved WHERE id = ?", (reservation.id,))


def _add(day: str, key: str, tokens: int, cost: float, c: sqlite3.Connection) -> None:
    with write_transaction(c):
        _count(day, key, tokens, cost, c)


def _count(day: str, key: str, tokens: int, cost: float, c: sqlite3.Connection) -> None:
    yesterday = (dt.date.fromisoformat(day) - dt.timedelta(days=1)).isoformat()
    c.execute("DELETE FROM budget_spend WHERE day < ?", (yesterday,))  # yesterday's settle late
    c.execute(
        "INSERT INTO budget_spend VALUES (?, ?, ?, ?) ON CONFLICT (day, key) DO UPDATE SET "
        "tokens = budget_spend.tokens + excluded.tokens, cost_usd = budget_spend.cost_usd + excluded.cost_usd",
        (day, key, tokens, cost),
    )


def _counted(receipt: Receipt | None) -> tuple[int, float]:
    """A receipt's tokens and cost (None: nothing was spent; unpriced models cost 0)."""
    if receipt is None:
        return 0, 0.0
    tokens = receipt.input_tokens + receipt.output_tokens + receipt.cache_read_tokens + receipt.cache_creation_tokens
    return tokens, receipt.cost_usd or 0.0
