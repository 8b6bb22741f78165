"""What pacing costs a request: one process (memory) against several workers (the shared SQLite file).

- A rate-limit take that is allowed, and one that is refused (a flood of refused requests), per key.
- Entering and leaving a conversation's turn nobody else holds (every Slack message pays it).
- Two workers taking from one budget at once: takes per second in total, and that none is lost.

All in one process, two `Pacing` objects on one file standing for two workers (each has its own
connection, as each worker process does).

    python -m benchmarks.bench_pacing
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from chats.pacing import Pacing
from chats.state import ChatState

TAKES = 2_000
TURNS = 500
REPEATS = 5


async def _per_call_us(calls: int, call: Callable[[int], Awaitable[object]]) -> float:
    """Median over REPEATS of the mean microseconds per call."""
    means = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        for number in range(calls):
            await call(number)
        means.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(means)


async def _measure(root: Path) -> dict[str, tuple[float, float]]:
    workers = [ChatState(root / "state.sqlite3", workers=2) for _ in range(2)]
    local, shared, other = Pacing(), workers[0].pacing, workers[1].pacing
    try:
        figures: dict[str, tuple[float, float]] = {}
        allowed = {p: p.rate_limit("bench", 10**9) for p in (local, shared)}
        figures["take, allowed"] = (
            await _per_call_us(TAKES, lambda n: allowed[local].take(f"client-{n % 100}")),
            await _per_call_us(TAKES, lambda n: allowed[shared].take(f"client-{n % 100}")),
        )
        refused = {p: p.rate_limit("bench-refused", 1) for p in (local, shared)}
        for limit in refused.values():
            await limit.take("flooder")
        figures["take, refused"] = (
            await _per_call_us(TAKES, lambda n: refused[local].take("flooder")),
            await _per_call_us(TAKES, lambda n: refused[shared].take("flooder")),
        )

        async def turn(pacing: Pacing, number: int) -> None:
            async with pacing.turn(f"thread-{number}"):
                pass

        figures["turn, enter and leave"] = (
            await _per_call_us(TURNS, lambda n: turn(local, n)),
            await _per_call_us(TURNS, lambda n: turn(shared, n)),
        )

        budget = 1_000
        limits = [shared.rate_limit("race", budget), other.rate_limit("race", budget)]
        started = time.perf_counter()
        takes = await asyncio.gather(*(limits[n % 2].take("one client") for n in range(3 * budget)))
        elapsed = time.perf_counter() - started
        allowed_count = sum(wait is None for wait in takes)
        assert allowed_count == budget, f"two workers allowed {allowed_count} of a budget of {budget}"
        figures["two workers, one budget: takes/s"] = (float("nan"), len(takes) / elapsed)
        return figures
    finally:
        for state in workers:
            state.close()


def run() -> dict[str, tuple[float, float]]:
    with tempfile.TemporaryDirectory() as scratch:
        return asyncio.run(_measure(Path(scratch)))


def report(figures: dict[str, tuple[float, float]]) -> None:
    print("\n## Pacing: one process (memory) against several workers (shared SQLite file)\n")
    print("| | one process | several workers | ratio |")
    print("|---|---|---|---|")
    for name, (one, several) in figures.items():
        if name.endswith("takes/s"):
            print(f"| {name} | – | {several:,.0f} | – |")
        else:
            ratio = several / one
            shown = f"{ratio:.2f}x" if ratio < 10 else f"{ratio:.0f}x"
            print(f"| {name} (µs) | {one:.1f} | {several:.1f} | {shown} |")


if __name__ == "__main__":
    report(run())
