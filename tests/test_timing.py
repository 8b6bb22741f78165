"""The measures tests/timing.py gives the tests: they see work, not a busy machine."""

from __future__ import annotations

import asyncio
import re
import time

from tests.timing import LoopSteps, growth, linear_limit


def _spin(seconds: float) -> None:
    started = time.thread_time()
    while time.thread_time() - started < seconds:
        pass


async def test_a_loop_step_counts_the_cpu_it_holds_the_loop_for_not_the_time_it_waits() -> None:
    with LoopSteps() as held:
        await asyncio.sleep(0)
        _spin(0.05)  # work on the loop, between two awaits
        await asyncio.sleep(0)
    with LoopSteps() as delayed:
        await asyncio.sleep(0)
        time.sleep(0.1)  # what a busy machine does to a step: it is late, not longer
        await asyncio.sleep(0)
    assert held.longest >= 0.045 and held.total >= held.longest
    assert delayed.longest < 0.045


def test_growth_tells_quadratic_from_linear() -> None:
    quadratic = re.compile(r"\d*\d*x").match  # splits a run of digits every way before it gives up
    assert growth(lambda t: t.count("1"), "1" * 1_000, "1" * 8_000) < linear_limit(8)
    assert growth(quadratic, "1" * 200 + "y", "1" * 1_600 + "y") > linear_limit(8)
