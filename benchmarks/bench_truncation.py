"""N+1 truncation and bounded memory, through the tool path (Database.execute + format_for_model).

- Time and memory of `SELECT * FROM flights` against `... LIMIT 51`, and an 8x copy of flights:
  cost must not grow with the table.
- Peak memory of 51 rows of 10 MB cells against 51 rows of small cells: the engine cuts cells
  before the app holds them, so the app's cost stays flat whatever the engine produced.
- A naive fetch of every row of flights (no cap) for contrast.

Every case runs in a fresh process so peak RSS means something; the engine's own peak (it runs in
a child process) is read from /proc.

    python -m benchmarks.bench_truncation
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPEATS = 15

CASES = {
    "SELECT * FROM flights LIMIT 51": ("tool", "SELECT * FROM nycflights13.flights LIMIT 51"),
    "SELECT * FROM flights": ("tool", "SELECT * FROM nycflights13.flights"),
    "SELECT * FROM flights_x8 (2.7 M rows)": ("tool", "SELECT * FROM bench.flights_x8"),
    "51 rows of small cells": ("tool", "SELECT randomString(10) AS s FROM numbers(51)"),
    "51 rows of 10 MB cells": ("tool", "SELECT randomString(10000000) AS s FROM numbers(51)"),
    "naive: every row of flights, no cap": ("naive", "SELECT * FROM nycflights13.flights"),
}

_PREPARE = """
import sys, chdb
from pathlib import Path
from agent.db.demo import load_demo
path = Path(sys.argv[1])
load_demo(path)
conn = chdb.connect(str(path))
conn.query("CREATE DATABASE IF NOT EXISTS bench")
conn.query("CREATE TABLE IF NOT EXISTS bench.flights_x8 AS nycflights13.flights")
if int(str(conn.query("SELECT count() FROM bench.flights_x8", "CSV")).strip()) == 0:
    conn.query("INSERT INTO bench.flights_x8 SELECT f.* FROM nycflights13.flights AS f, numbers(8) AS n")
conn.close()
"""

_MEASURE = """
import asyncio, json, resource, sys, time
from pathlib import Path
from agent.config import Settings
from agent.db import format_for_model, new_query_id, open_database
data_dir, mode, sql, repeats = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])

def engine_peak_kb(db):
    pid = db.backend._child.process.pid
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

async def main():
    settings = Settings(_env_file=None, agent_data_dir=data_dir, clickhouse_databases=["nycflights13", "bench"],
                        max_rows_to_read=10**10, max_bytes_to_read=10**12, max_result_rows=10**9,
                        max_result_bytes=10**11)
    db = open_database(settings)
    await db.execute("SELECT 1")
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        if mode == "tool":
            result = await db.execute(sql)
            assert result.ok and result.row_count <= 50, result.error
            format_for_model(result, 10_000)
        else:
            raw = await db.backend.query(sql, "TabSeparated", new_query_id())
            rows = [line.split(b"\\t") for line in raw.splitlines()]
            del raw, rows
        times.append(time.perf_counter() - started)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    engine = engine_peak_kb(db)
    await db.close()
    print(json.dumps({"times": times, "rss_growth_kb": peak - base, "engine_peak_kb": engine}))

asyncio.run(main())
"""


def _python(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"benchmark step failed:\n{done.stderr[-2000:]}")
    return done.stdout


def run() -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as scratch:
        print("Preparing demo data and an 8x copy of flights...", flush=True)
        _python(_PREPARE, str(Path(scratch) / "clickhouse"))
        figures = {}
        for label, (mode, sql) in CASES.items():
            repeats = 3 if mode == "naive" or "10 MB" in label else REPEATS
            print(f"  {label} ({repeats} runs)", flush=True)
            measured = json.loads(_python(_MEASURE, scratch, mode, sql, str(repeats)))
            figures[label] = {
                "median_ms": statistics.median(measured["times"]) * 1000,
                "app_rss_growth_mb": measured["rss_growth_kb"] / 1024,
                "engine_peak_mb": measured["engine_peak_kb"] / 1024,
            }
    return figures


def report(figures: dict[str, dict[str, float]]) -> None:
    base = figures["SELECT * FROM flights LIMIT 51"]
    print(f"\n{'case':40} {'median ms':>10} {'x LIMIT 51':>11} {'app peak RSS growth MB':>23} {'engine peak MB':>15}")
    for label, f in figures.items():
        ratio = f["median_ms"] / base["median_ms"]
        print(
            f"{label:40} {f['median_ms']:10.1f} {ratio:10.2f}x {f['app_rss_growth_mb']:23.1f} "
            f"{f['engine_peak_mb']:15.1f}"
        )
    big, small = figures["51 rows of 10 MB cells"], figures["51 rows of small cells"]
    app_ratio = (big["app_rss_growth_mb"] + 1) / (small["app_rss_growth_mb"] + 1)
    print(
        f"\n51 rows of 10 MB cells against small cells: app peak RSS growth {big['app_rss_growth_mb']:.1f} MB "
        f"vs {small['app_rss_growth_mb']:.1f} MB (ratio {app_ratio:.2f}, +1 MB each to avoid dividing by zero); "
        f"engine peak {big['engine_peak_mb']:.0f} MB vs {small['engine_peak_mb']:.0f} MB."
    )


if __name__ == "__main__":
    report(run())
