"""One process's share of Slack's rate limits, so many answers at once never get the app rate limited.

Slack counts each Web API method "per API method per workspace/team per app" in tiers (Tier 2 20+ per
minute, Tier 3 50+, Tier 4 100+; chat.postMessage about one a second per channel:
docs.slack.dev/apis/web-api/rate-limits). Every write of every answer in this process draws from the same
budget: a progress edit only while a reserve is left (else it is skipped, and the next one shows the latest
state), an answer's final write waits until the window has room. Finals therefore land even when thirty
answers are being written at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

# Each method's tier from its reference page (docs.slack.dev/reference/methods/<method>, "Rate Limits").
PER_MINUTE = {
    "chat.update": 50,  # Tier 3
    "chat.delete": 50,  # Tier 3
    "chat.startStream": 20,  # Tier 2
    "chat.stopStream": 20,  # Tier 2
    "chat.appendStream": 100,  # Tier 4
    "assistant.threads.setStatus": 50,  # "special rate limits apply": taken as Tier 3
}
PER_CHANNEL_PER_MINUTE = {"chat.postMessage": 60}  # one a second per channel
PROGRESS_SHARE = 0.6  # of each window, what progress edits may use; the rest is kept for final writes
WINDOW_S = 60.0
MAX_KEYS = 10_000
RECHECK_S = 1.0  # a waiting final write looks again at least this often
MAX_WAIT_S = 30.0  # ... and goes after this long anyway: Slack's own 429 and Retry-After take over


class CallBudget:
    """Calls made per (team, method[, channel]) over the last `window_s`, against each method's tier, of
    which this process takes its share: `workers` processes share the app's limits."""

    def __init__(
        self,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        *,
        workers: int = 1,
        max_wait_s: float = MAX_WAIT_S,
    ) -> None:
        self.window_s, self.clock = window_s, clock
        self._workers, self._max_wait_s = max(1, workers), max_wait_s
        self._calls: dict[tuple[str, ...], deque[float]] = {}

    def try_take(self, team: str, method: str, channel: str = "") -> bool:
        """For a progress write: True (and counted) while the method's progress share has room."""
        limit = self._limit(method)
        if limit is None:
            return True
        calls = self._window(team, method, channel)
        if len(calls) >= max(1, int(limit * PROGRESS_SHARE)):
            return False
        calls.append(self.clock())
        return True

    async def take(self, team: str, method: str, channel: str = "") -> None:
        """For a final write: wait (never skipped) until the method's window has room, then count it; after
        `max_wait_s` it goes anyway (a refusal then is Slack's, with its Retry-After, which the caller waits
        out)."""
        limit = self._limit(method)
        if limit is None:
            return
        give_up = self.clock() + self._max_wait_s
        while len(calls := self._window(team, method, channel)) >= limit and self.clock() < give_up:
            await asyncio.sleep(min(RECHECK_S, max(0.01, calls[0] + self.window_s - self.clock())))
        self._window(team, method, channel).append(self.clock())

    def count(self, team: str, method: str, channel: str = "") -> None:
        """A call that is made whatever the budget says (ending a broken stream, taking back a message)."""
        if _limit(method) is not None:
            self._window(team, method, channel).append(self.clock())

    def _limit(self, method: str) -> int | None:
        limit = _limit(method)
        return None if limit is None else max(1, limit // self._workers)

    def _window(self, team: str, method: str, channel: str) -> deque[float]:
        key = (team, method, channel) if method in PER_CHANNEL_PER_MINUTE else (team, method)
        now = self.clock()
        if len(self._calls) > MAX_KEYS:  # keys whose window emptied (a channel posted to once) go
            self._calls = {k: c for k, c in self._calls.items() if c and c[-1] > now - self.window_s}
        calls = self._calls.setdefault(key, deque())
        while calls and calls[0] <= now - self.window_s:
            calls.popleft()
        return calls


def _limit(method: str) -> int | None:
    return PER_CHANNEL_PER_MINUTE.get(method) or PER_MINUTE.get(method)


class Skipped(Exception):
    """A progress write the budget had no room for: the next paint shows the latest state instead."""
