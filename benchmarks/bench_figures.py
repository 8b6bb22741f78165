"""What the figure check costs on answers written to make it slow (issue 26), against plain text.

Every number of an answer was compared with every date of it, so an answer of dates took time square
in its length: 16,000 characters of dates took 2.7 s of CPU, 50,000 took 16.5 s (plain text: 0.2 s).
Measured here, in one run, on answers of the same length citing one result of 365 days:

- date-dense (`2013-01-05, 2013-01-06, ...`) and number-dense (`120,835, 111,279, ...`) answers against
  plain prose, as CPU time ratios (the check's time limit is off: this is the work itself);
- how the time grows with the answer's length (4x the characters of dates);
- the wait of a job on the default executor (the conversation store's) while six 16,000-character
  date answers are checked at once through the pipeline's FigureReview, against the same job alone.

    python -m benchmarks.bench_figures
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from agent.config import Settings
from agent.db import QueryResult
from agent.figures import Evidence, check_answer
from agent.metrics import Metrics
from agent.pipeline.figures import FigureReview
from agent.pipeline.state import RunState
from agent.prompts import PromptLibrary
from agent.runner import Event, ExecutedQuery

REPEATS = 15
LENGTH = 50_000
DAYS = [f"2013-{month:02d}-{day:02d}" for month in range(1, 13) for day in range(1, 29)]
EVIDENCE = [
    Evidence(
        "Q1",
        "SELECT toDate(time_hour) AS day, count() AS flights FROM nycflights13.flights GROUP BY day",
        QueryResult(
            query_id="x",
            sql="SELECT 1",
            columns=["day", "flights"],
            types=["Date", "UInt64"],
            rows=[[day, str(900 + i)] for i, day in enumerate(DAYS)],
        ),
    )
]


def answers(length: int) -> dict[str, str]:
    cite = " [Q1]"
    dates = ", ".join(DAYS[i % len(DAYS)] for i in range(length // 12 + 1))
    numbers = ", ".join(f"{100 + i % 900},{i % 1000:03d}" for i in range(length // 9 + 1))
    plain = "The weather was fine and nothing much happened at all that day. " * (length // 64 + 1)
    texts = {"date-dense": dates, "number-dense": numbers, "plain text": plain}
    return {name: text[: length - len(cite)] + cite for name, text in texts.items()}


def _cpu_ms(work: Callable[[], object]) -> float:
    started = time.process_time()
    work()
    return (time.process_time() - started) * 1000


def check_times(length: int = LENGTH) -> dict[str, float]:
    """The least CPU milliseconds of one check, by answer, over REPEATS interleaved runs: a busy machine
    (other processes evict caches, share the cores) slows a run, never speeds one up."""
    texts = answers(length)
    samples: dict[str, list[float]] = {name: [] for name in texts}
    for _ in range(REPEATS):
        for name, text in texts.items():
            samples[name].append(_cpu_ms(lambda text=text: check_answer(text, question="", evidence=EVIDENCE)))
    return {name: min(values) for name, values in samples.items()}


async def _default_executor_wait(checks: int) -> float:
    """Milliseconds a no-op job on the default executor waits while `checks` date answers are checked
    (each as a run settles its answer: FigureReview.settle, on the check's own workers)."""
    metrics = Metrics(CollectorRegistry())
    review = FigureReview(PromptLibrary(Settings.model_fields["agent_prompts_dir"].default), time_limit_s=60)
    text = answers(16_000)["date-dense"]

    async def sink(event: Event) -> None:
        pass

    async def one_check() -> None:
        state = RunState(question="busiest days?", interface="cli", emit=sink, metrics=metrics)
        state.answer = text
        state.queries.append(ExecutedQuery(id="Q1", question="", sql=EVIDENCE[0].sql, result=EVIDENCE[0].result))
        await review.settle(state)

    running = [asyncio.create_task(one_check()) for _ in range(checks)]
    await asyncio.sleep(0.005)  # the checks are under way
    started = time.perf_counter()
    await asyncio.get_running_loop().run_in_executor(None, lambda: None)
    waited = (time.perf_counter() - started) * 1000
    await asyncio.gather(*running)
    return waited


def run() -> dict[str, float]:
    times = check_times()
    quarter = check_times(LENGTH // 4)
    alone = statistics.median(asyncio.run(_default_executor_wait(0)) for _ in range(REPEATS))
    beside = statistics.median(asyncio.run(_default_executor_wait(6)) for _ in range(REPEATS))
    return {
        **{f"{name} ms": ms for name, ms in times.items()},
        "date-dense / plain text": times["date-dense"] / times["plain text"],
        "number-dense / plain text": times["number-dense"] / times["plain text"],
        "date-dense, 4x the length": times["date-dense"] / quarter["date-dense"],
        "default executor wait alone ms": alone,
        "default executor wait beside six checks ms": beside,
    }


def report(figures: dict[str, float]) -> None:
    print()
    print(f"Figure check, {LENGTH:,}-character answers citing 365 days (least CPU of {REPEATS}):")
    for name in ("date-dense", "number-dense", "plain text"):
        print(f"  {name:14} {figures[f'{name} ms']:7.2f} ms")
    print(f"  date-dense / plain text:   {figures['date-dense / plain text']:.2f}x (target: within 2x)")
    print(f"  number-dense / plain text: {figures['number-dense / plain text']:.2f}x")
    growth = figures["date-dense, 4x the length"]
    print(f"  date-dense at 4x the length: {growth:.2f}x the time (reading stops after the figures it checks)")
    print(
        "  a default-executor job waits"
        f" {figures['default executor wait beside six checks ms']:.1f} ms beside six 16,000-character date checks"
        f" ({figures['default executor wait alone ms']:.1f} ms alone)"
    )


if __name__ == "__main__":
    report(run())
