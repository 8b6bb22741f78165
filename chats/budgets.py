"""What one asker (a web client, a Slack user) may spend per UTC day: tokens and estimated cost, from each
answer's receipt (AGENT_DAILY_USER_TOKENS, AGENT_DAILY_USER_COST_USD; off by default).

Like the rate limits, the spending is counted in memory in one process and in the app's SQLite file when
the process is one of several workers, so an asker's budget holds whichever worker a question reaches.
The question that crosses the budget is answered; the next one is refused, saying when the day resets.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from agent.receipts import Receipt
from chats.state_file import SqliteFile, write_transaction

log = logging.getLogger(__name__)

MAX_LOCAL_KEYS = 10_000


@dataclass(frozen=True)
class Refusal:
    message: str
    retry_after_s: int


class DailyBudget:
    def __init__(
        self,
        *,
        max_tokens: int | None,
        max_cost_usd: float | None,
        file: SqliteFile | None = None,
        clock: Callable[[], float] = time.time,  # wall time: the day is UTC's, and workers share it
    ) -> None:
        self.max_tokens, self.max_cost_usd = max_tokens, max_cost_usd
        self._file, self._clock = file, clock
        self._local: dict[tuple[str, str], tuple[int, float]] = {}

    @property
    def enabled(self) -> bool:
        return self.max_tokens is not None or self.max_cost_usd is not None

    async def refusal(self, key: str) -> Refusal | None:
        """None when `key` may ask today; otherwise what to tell them and when they may ask again."""
        if not self.enabled:
            return None
        tokens, cost = await self._spent(self._day(), key)
        over = []
        if self.max_tokens is not None and tokens >= self.max_tokens:
            over.append(f"{tokens:,} of {self.max_tokens:,} tokens")
        if self.max_cost_usd is not None and cost >= self.max_cost_usd:
            over.append(f"${cost:.2f} of ${self.max_cost_usd:.2f}")
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

    async def _spent(self, day: str, key: str) -> tuple[int, float]:
        if self._file is None:
            return self._local.get((day, key), (0, 0.0))
        try:
            return await self._file.run(partial(_read, day, key))
        except sqlite3.OperationalError:  # the shared file is busy: let the question through, say so
            log.warning("could not read an asker's daily budget; letting the question through", exc_info=True)
            return 0, 0.0

    def _day(self) -> str:
        return dt.datetime.fromtimestamp(self._clock(), dt.UTC).date().isoformat()


def _read(day: str, key: str, c: sqlite3.Connection) -> tuple[int, float]:
    row = c.execute("SELECT tokens, cost_usd FROM budget_spend WHERE day = ? AND key = ?", (day, key)).fetchone()
    return (int(row[0]), float(row[1])) if row else (0, 0.0)


def _add(day: str, key: str, tokens: int, cost: float, c: sqlite3.Connection) -> None:
    with write_transaction(c):
        c.execute("DELETE FROM budget_spend WHERE day < ?", (day,))
        c.execute(
            "INSERT INTO budget_spend VALUES (?, ?, ?, ?) ON CONFLICT (day, key) DO UPDATE SET "
            "tokens = tokens + excluded.tokens, cost_usd = cost_usd + excluded.cost_usd",
            (day, key, tokens, cost),
        )
