"""Per-thread queues that answer one message at a time in this process (chats/pacing.py keeps the order
across worker processes, and the per-user question budget)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial

log = logging.getLogger(__name__)
Job = Callable[[], Awaitable[None]]


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
