"""What rendering every cell costs the engine: the cut mark written in Python (`capped_select`, the
tool path) against the same mark built by the engine (`export_select`, downloads; the way the tool
path built it before).

ClickHouse analyses the per-column expression once for every column of the result, so its size costs
per column whatever the row count: the mark as an expression (about 25 functions) cost more than most
queries themselves. Timed on chdb in this process, fresh statements each time (no cache of ours).

    python -m benchmarks.bench_render
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import chdb

from agent.db.rendering import CAPPED_FORMAT, capped_select, export_select
from benchmarks.demo_data import load_demo_elsewhere

REPEATS = 40
CELL_CHARS = 200
QUERIES = {
    "19 columns (flights LIMIT 50)": "SELECT * FROM nycflights13.flights LIMIT 50",
    "2 columns (count of airlines)": "SELECT count() AS airlines, 17 AS chat FROM nycflights13.airlines",
}
FORMS = {"mark in Python": capped_select, "mark by the engine": export_select}


def run() -> dict[str, dict[str, float]]:
    """Median milliseconds of CPU per statement, by query and form (interleaved)."""
    with tempfile.TemporaryDirectory() as scratch:
        load_demo_elsewhere(Path(scratch))
        connection = chdb.connect(str(Path(scratch) / "clickhouse"))
        samples: dict[str, dict[str, list[float]]] = {q: {f: [] for f in FORMS} for q in QUERIES}
        for repeat in range(REPEATS):
            for label, sql in QUERIES.items():
                for form, build in FORMS.items():
                    statement = build(f"{sql} -- {repeat}", limit=51, max_cell_chars=CELL_CHARS)
                    started = time.process_time()
                    connection.query(statement, CAPPED_FORMAT)
                    samples[label][form].append(time.process_time() - started)
        connection.close()
    return {q: {f: statistics.median(s) * 1000 for f, s in forms.items()} for q, forms in samples.items()}


def report(figures: dict[str, dict[str, float]]) -> None:
    print()
    print("CPU per capped select, chdb in process (median of", REPEATS, "fresh statements):")
    for label, forms in figures.items():
        python, engine = forms["mark in Python"], forms["mark by the engine"]
        print(f"  {label:32} mark in Python {python:6.2f} ms, by the engine {engine:6.2f} ms: {python / engine:.2f}x")


if __name__ == "__main__":
    report(run())
