"""Timing a busy machine cannot fail: what a test asserts about time is a ratio to a baseline measured in the
same test, never an absolute figure (those are the benchmarks', in benchmarks/).

Each measure is the fastest of a few tries of CPU time spent by this thread: other processes' load delays a
thread but does not add to its CPU time, and the fastest try drops the cache misses of a preemption. A
complexity claim is a growth: the same work on text `factor` times larger may take about `factor` times
longer (linear), not `factor` squared.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

TRIES = 3
MIN_MEASURED_S = 0.005  # a call faster than this is repeated until its total reaches it (timer and noise)


def cpu_per_call_s(work: Callable[[], object], *, tries: int = TRIES) -> float:
    """The fastest of `tries` measures of one call's CPU time (this thread), fast calls repeated."""
    best = float("inf")
    for _ in range(tries):
        calls, started = 0, time.thread_time()
        while True:
            work()
            calls += 1
            spent = time.thread_time() - started
            if spent >= MIN_MEASURED_S:
                break
        best = min(best, spent / calls)
    return best


def growth(work: Callable[[str], object], small: str, large: str) -> float:
    """How many times longer `work` takes on `large` than on `small`: about len(large) / len(small) when
    it is linear, that squared when quadratic."""
    return cpu_per_call_s(lambda: work(large)) / cpu_per_call_s(lambda: work(small))


def linear_limit(factor: float) -> float:
    """The growth a linear transformation stays under for text `factor` times larger: three times linear,
    a third of quadratic for the factors used here (8 and more)."""
    return 3 * factor


async def fastest_wall_s(work: Callable[[], Awaitable[Any]], *, tries: int = TRIES) -> float:
    """The fastest of `tries` wall times of `work` (for work that waits on another process or a socket,
    where this thread's CPU time says nothing): compared only with a baseline measured the same way."""
    best = float("inf")
    for _ in range(tries):
        started = time.perf_counter()
        await work()
        best = min(best, time.perf_counter() - started)
    return best


class LoopSteps:
    """The CPU time of each step the event loop runs (one callback: a task's step between two awaits), on
    the loop's own thread: a step that holds the loop for long does so on any machine, while a busy machine
    only delays steps, which adds nothing to their CPU time.

        with LoopSteps() as steps:
            await work()
        steps.longest, steps.total
    """

    def __init__(self) -> None:
        self.longest = 0.0
        self.total = 0.0
        self._original = asyncio.events.Handle._run
        self._thread = threading.get_ident()

    def __enter__(self) -> LoopSteps:
        steps, original, thread = self, self._original, self._thread

        def timed(handle: asyncio.events.Handle) -> None:
            if threading.get_ident() != thread:
                return original(handle)
            started = time.thread_time()
            try:
                return original(handle)
            finally:
                spent = time.thread_time() - started
                steps.longest, steps.total = max(steps.longest, spent), steps.total + spent

        asyncio.events.Handle._run = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: Any) -> None:
        asyncio.events.Handle._run = self._original  # type: ignore[method-assign]
