"""How many questions a client may ask a minute, for every adapter.

In one process the takes are counted in memory. With several worker processes (`agent serve --workers
N`) they are counted in the app's SQLite file, so a client's budget counts its questions wherever they
land.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from functools import partial

from chats.state_file import STATE_UNAVAILABLE, StateFile, write_transaction
from chats.state_postgres import GroupCalls, PostgresFile

log = logging.getLogger(__name__)

WINDOW_S = 60.0
PRUNE_EVERY_S = 1.0
MAX_LOCAL_KEYS = 10_000  # clients counted at once in memory; a new one past this waits (see LocalRateLimit)


class RateLimit(ABC):
    """At most `per_minute` takes per key in any sliding window of `window_s`."""

    def __init__(self, per_minute: int, window_s: float = WINDOW_S) -> None:
        self.per_minute, self.window_s = per_minute, window_s

    @abstractmethod
    async def take(self, key: str) -> float | None:
        """None when `key` may go ahead now (and it is counted); otherwise seconds until it may."""


class LocalRateLimit(RateLimit):
    """Memory stays bounded under a stream of fresh keys: keys whose takes have all expired are dropped as
    the table fills (at most once a second, so a full table costs no scan per request), and a new key that
    finds it full of clients active this window is refused until one expires, rather than let it grow."""

    def __init__(
        self,
        per_minute: int,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = MAX_LOCAL_KEYS,
    ):
        super().__init__(per_minute, window_s)
        self._clock, self.max_keys = clock, max_keys
        self._seen: dict[str, deque[float]] = {}
        self._pruned_at = float("-inf")

    async def take(self, key: str) -> float | None:
        now = self._clock()
        seen = self._seen.get(key)
        if seen is None:
            if len(self._seen) >= self.max_keys and not self._pruned(now):
                return PRUNE_EVERY_S  # when the table is pruned again
            seen = self._seen[key] = deque()
        while seen and now - seen[0] >= self.window_s:
            seen.popleft()
        if len(seen) >= self.per_minute:
            return self.window_s - (now - seen[0])
        seen.append(now)
        return None

    def _pruned(self, now: float) -> bool:
        """Drops the keys idle for a whole window; True when that made room."""
        if now - self._pruned_at >= PRUNE_EVERY_S:
            self._pruned_at = now
            for idle in [k for k, v in self._seen.items() if not v or now - v[-1] >= self.window_s]:
                del self._seen[idle]
        return len(self._seen) < self.max_keys


class SharedRateLimit(RateLimit):
    def __init__(
        self,
        file: StateFile,
        scope: str,
        per_minute: int,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.time,  # wall time: the processes share it
    ) -> None:
        super().__init__(per_minute, window_s)
        self._file, self._scope, self._clock = file, scope, clock
        self._refused_until: dict[str, float] = {}
        self._swept_at = 0.0
        # On PostgreSQL the takes that come at once are made together, one after another under one lock.
        self._takes = GroupCalls.each(file, self._take_in, locked=True) if isinstance(file, PostgresFile) else None

    async def take(self, key: str) -> float | None:
        # A refused client is answered from memory until its wait is over: a flood of refused requests
        # costs no write to the file every worker shares.
        if (until := self._refused_until.get(key)) is not None:
            if (left_s := until - self._clock()) > 0:
                return left_s
            del self._refused_until[key]
        try:
            wait = await (self._takes(key) if self._takes is not None else self._file.run(partial(self._take, key)))
        except STATE_UNAVAILABLE:  # the shared file is locked or busy: serve the request, say so
            log.warning("could not count a request against its rate limit; letting it through", exc_info=True)
            return None
        if wait is not None:
            self._refused_until[key] = self._clock() + wait
            if len(self._refused_until) > MAX_LOCAL_KEYS:
                now = self._clock()
                self._refused_until = {k: t for k, t in self._refused_until.items() if t > now}
        return wait

    def _take(self, key: str, c: sqlite3.Connection) -> float | None:
        with write_transaction(c):  # count and add under one lock: two workers cannot both take the last
            return self._take_in(c, key)

    def _take_in(self, c: sqlite3.Connection, key: str) -> float | None:
        """The take, inside the write transaction the caller holds."""
        now = self._clock()  # under the lock, so no take is older than one counted before it
        horizon = now - self.window_s
        if now - self._swept_at >= self.window_s:  # idle clients' takes
            c.execute("DELETE FROM pace_takes WHERE scope = ? AND at <= ?", (self._scope, horizon))
            self._swept_at = now
        if not isinstance(c, sqlite3.Connection):  # PostgreSQL: the same in one statement, one round trip
            take = {"scope": self._scope, "key": key, "horizon": horizon, "now": now, "limit": self.per_minute}
            count, oldest = c.execute(_TAKE, take).fetchone()
            return max(0.0, oldest - horizon) if count >= self.per_minute else None
        # Takes out of the window, and any "from the future" (the clock was stepped back), no longer count.
        c.execute(
            "DELETE FROM pace_takes WHERE scope = ? AND key = ? AND (at <= ? OR at > ?)",
            (self._scope, key, horizon, now),
        )
        count, oldest = c.execute(
            "SELECT count(*), min(at) FROM pace_takes WHERE scope = ? AND key = ?", (self._scope, key)
        ).fetchone()
        if count >= self.per_minute:
            return max(0.0, oldest - horizon)
        c.execute("INSERT INTO pace_takes VALUES (?, ?, ?)", (self._scope, key, now))
        return None


# SharedRateLimit's take on PostgreSQL, under the write lock: the key's takes out of the window (or from the
# future) deleted, those in it counted (the count reads the table as it was before the delete, so it counts only
# those in the window), and this one added while under the limit.
_TAKE = """WITH gone AS (
    DELETE FROM pace_takes WHERE scope = :scope AND key = :key AND (at <= :horizon OR at > :now)
), seen AS (
    SELECT count(*) AS n, min(at) AS oldest FROM pace_takes
    WHERE scope = :scope AND key = :key AND at > :horizon AND at <= :now
), taken AS (
    INSERT INTO pace_takes (scope, key, at) SELECT :scope, :key, :now FROM seen WHERE n < :limit
)
SELECT n, oldest FROM seen"""
