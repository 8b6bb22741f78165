"""Fair shares of the engine: one question cannot take every connection.

Every statement the agent runs for someone takes a slot. At most `total` run at once (the engine's
connections), and at most `per_owner` for one owner (a run, or the downloads). When a slot frees, it
goes to the waiting owner that holds the fewest slots, longest-waiting first, so eight heavy queries
from one question queue behind each other, not in front of another person's trivial count.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass(order=True)
class _Waiter:
    order: int
    owner: str = field(compare=False)
    ready: asyncio.Future[None] = field(compare=False)


class EngineShare:
    def __init__(self, *, total: int, per_owner: int) -> None:
        self.total = max(1, total)
        self.per_owner = max(1, min(per_owner, self.total))
        self._held: dict[str, int] = {}
        self._waiting: list[_Waiter] = []
        self._order = itertools.count()

    @property
    def in_use(self) -> int:
        return sum(self._held.values())

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @asynccontextmanager
    async def slot(self, owner: str) -> AsyncIterator[None]:
        await self._take(owner)
        try:
            yield
        finally:
            self._give_back(owner)

    async def _take(self, owner: str) -> None:
        if self._may_take(owner):  # a free slot means nobody who could take it is waiting
            self._hold(owner)
            return
        waiter = _Waiter(next(self._order), owner, asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        try:
            await waiter.ready
        except BaseException:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            elif waiter.ready.done() and not waiter.ready.cancelled():
                self._give_back(owner)  # granted as it was cancelled: hand the slot on
            raise

    def _may_take(self, owner: str) -> bool:
        return self.in_use < self.total and self._held.get(owner, 0) < self.per_owner

    def _hold(self, owner: str) -> None:
        self._held[owner] = self._held.get(owner, 0) + 1

    def _give_back(self, owner: str) -> None:
        left = self._held.get(owner, 0) - 1
        if left > 0:
            self._held[owner] = left
        else:
            self._held.pop(owner, None)
        self._grant()

    def _grant(self) -> None:
        """Free slots go to the owners holding the fewest, the longest-waiting first."""
        # A waiter cancelled but not yet run (every task cancelled at once, as at asyncio.run's end) has
        # no one left to take its slot.
        self._waiting = [w for w in self._waiting if not w.ready.done()]
        while self.in_use < self.total:
            eligible = [w for w in self._waiting if self._held.get(w.owner, 0) < self.per_owner]
            if not eligible:
                return
            chosen = min(eligible, key=lambda w: (self._held.get(w.owner, 0), w.order))
            self._waiting.remove(chosen)
            self._hold(chosen.owner)
            chosen.ready.set_result(None)
