"""Pacing: a per-user question budget, and per-thread queues that answer one message at a time."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial

log = logging.getLogger(__name__)
Job = Callable[[], Awaitable[None]]


class RateLimiter:
    """At most `per_minute` questions per key in any 60 seconds."""

    def __init__(self, per_minute: int, window_s: float = 60.0) -> None:
        self.per_minute, self._window_s = per_minute, window_s
        self._seen: dict[str, deque[float]] = {}

    def retry_after(self, key: str) -> float | None:
        """None when `key` may ask now (the question is counted); otherwise seconds until it may."""
        now = time.monotonic()
        seen = self._seen.setdefault(key, deque())
        while seen and now - seen[0] >= self._window_s:
            seen.popleft()
        if len(seen) >= self.per_minute:
            return self._window_s - (now - seen[0])
        seen.append(now)
        if len(self._seen) > 10_000:  # forget idle users rather than grow without bound
            for idle in [k for k, v in self._seen.items() if not v or now - v[-1] >= self._window_s]:
                del self._seen[idle]
        return None


class SerialQueues:
    """Jobs with the same key run one at a time, in the order they were added; different keys run
    side by side. Every job is tracked, so a shutdown can stop them and a test can wait for them."""

    def __init__(self) -> None:
        self._tails: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, key: str, job: Job) -> asyncio.Task[None]:
        task = asyncio.create_task(self._after(self._tails.get(key), job), name=f"slack-{key}")
        self._tails[key] = task
        self._tasks.add(task)
        task.add_done_callback(partial(self._finished, key))
        return task

    async def _after(self, previous: asyncio.Task[None] | None, job: Job) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        try:
            await job()
        except Exception:  # a job reports its own failures; this keeps the queue going
            log.exception("a Slack job failed")

    def _finished(self, key: str, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._tails.get(key) is task:
            del self._tails[key]

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    async def idle(self) -> None:
        """Wait until every job added so far, and any they added, has finished."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
