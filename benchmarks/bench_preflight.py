"""What the preflight costs each query (agent/pipeline/preflight.py): the engine's `EXPLAIN ESTIMATE` of
a statement against running it, on the demo data in the embedded engine, the statement check already
cached for both (as the pipeline's preflight leaves it for the run). Twelve monthly aggregates over
flights, three rounds.

    python -m benchmarks.bench_preflight
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from agent.config import Settings
from agent.db import open_database
from agent.db.estimate import estimate_reads
from benchmarks.demo_data import load_demo_elsewhere

QUERIES = [
    f"SELECT origin, avg(arr_delay) FROM nycflights13.flights WHERE month = {month} GROUP BY origin"
    for month in range(1, 13)
]
ROUNDS = 3


async def _measure(data_dir: Path) -> dict[str, float]:
    db = open_database(Settings(_env_file=None, clickhouse_url=f"chdb://{data_dir / 'clickhouse'}"))  # type: ignore[call-arg]
    try:
        for sql in QUERIES:
            await db.execute(sql)  # the checks cached, the engine warm
        runs, estimates = [], []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for sql in QUERIES:
                await db.execute(sql)
            runs.append((time.perf_counter() - started) / len(QUERIES))
            started = time.perf_counter()
            for sql in QUERIES:
                await estimate_reads(db, sql)
            estimates.append((time.perf_counter() - started) / len(QUERIES))
    finally:
        await db.close()
    run_ms, estimate_ms = statistics.median(runs) * 1000, statistics.median(estimates) * 1000
    return {"run_ms": run_ms, "estimate_ms": estimate_ms, "ratio": estimate_ms / run_ms}


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as scratch:
        load_demo_elsewhere(Path(scratch))
        return asyncio.run(_measure(Path(scratch)))


def report(result: dict[str, float]) -> None:
    print(
        f"preflight: EXPLAIN ESTIMATE {result['estimate_ms']:.1f} ms a query, running it {result['run_ms']:.1f} ms "
        f"(ratio {result['ratio']:.2f})"
    )


if __name__ == "__main__":
    report(run())
