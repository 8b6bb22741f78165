"""How late the event loop wakes up: the measure of whether one request's work is freezing the others.

A task sleeps a fixed interval and records how much later than asked it woke (`agent_event_loop_lag_seconds`)
and the worst lag of the last window (`agent_event_loop_lag_max_seconds`, which the dashboard draws and an
alert watches). A frozen loop cannot record while it is frozen; the next tick records the whole freeze.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager, suppress
from typing import TypeVar

from agent.metrics import Metrics

INTERVAL_S = 0.25
T = TypeVar("T")
WINDOW_S = 30.0


class LoopLag:
    def __init__(self, metrics: Metrics, *, interval_s: float = INTERVAL_S, window_s: float = WINDOW_S) -> None:
        self._metrics = metrics
        self._interval_s = interval_s
        self._window_s = window_s
        self._recent: deque[tuple[float, float]] = deque()  # (when, lag)

    async def run(self) -> None:
        while True:
            asked = time.monotonic()
            await asyncio.sleep(self._interval_s)
            woke = time.monotonic()
            self.record(woke, max(0.0, woke - asked - self._interval_s))

    def record(self, now: float, lag: float) -> None:
        self._metrics.loop_lag.observe(lag)
        self._recent.append((now, lag))
        while self._recent and self._recent[0][0] < now - self._window_s:
            self._recent.popleft()
        self._metrics.loop_lag_max.set(max(lag for _, lag in self._recent))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        task = asyncio.create_task(self.run(), name="loop-lag")
        try:
            yield
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task


async def worst_lag_during(work: Awaitable[T], interval_s: float = 0.01) -> tuple[T, float]:
    """`work`'s result, and the worst lag of the loop while it ran (a ticker every `interval_s`): how
    benchmarks and tests see whether a step holds the loop."""
    worst = 0.0

    async def tick() -> None:
        nonlocal worst
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(interval_s)
            worst = max(worst, time.perf_counter() - asked - interval_s)

    ticker = asyncio.create_task(tick())
    try:
        return await work, worst
    finally:
        ticker.cancel()
