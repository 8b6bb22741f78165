"""Schema at any size: the prompt stays bounded, the prefix stays cache-stable, the lookup finds the tables.

On generated warehouses (benchmarks/warehouse.py) of 100, 1,000 and 5,000 tables, through the code the
agent runs (the schema view, the request prefix, the lookup's search), with the default budgets:

- prompt tokens: tools and system prompt as sent (estimated at 4 characters a token, as the loop's
  own trimming does), against what every table whole would take, and what the question's retrieved
  tables add after the cached prefix;
- cache-stable: the prefix (tools, then the system blocks up to the breakpoint) is byte-identical for
  every question and after rebuilding the schema from the tables in another order;
- lookup latency: building the index, one search, one table's details (p50 / p95 over the questions);
- recall@5: the share of each question's needed tables among the search's first five, averaged.

    python -m benchmarks.bench_catalog [--sizes 100,1000,5000] [--engine 300]

`--engine N` also creates the N-table warehouse (empty) in the embedded engine and lets the app
introspect it, as it does at start, then searches the catalogue built from what it found.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.config import Settings
from agent.db import open_database
from agent.pipeline.context import estimate_tokens
from agent.pipeline.request import RequestPrefix
from agent.prompts import prompt_library
from agent.schema import SchemaCache, SchemaView, Table, build_view, render_schema
from benchmarks.warehouse import ddl, generate

SIZES = (100, 1_000, 5_000)


class FixedSchema(SchemaCache):
    """The schema cache's interface over tables built here, not introspected from an engine."""

    def __init__(self, view: SchemaView) -> None:
        self._fixed = view

    async def view(self) -> SchemaView:
        return self._fixed


def view_of(tables: list[Table], settings: Settings) -> SchemaView:
    return build_view(
        tables,
        max_chars=settings.schema_max_chars,
        catalogue_chars=settings.schema_catalogue_max_chars,
        current_database="default",
    )


def _prefix_bytes(parts: dict[str, Any]) -> bytes:
    marked = max(i for i, block in enumerate(parts["system"]) if block.get("cache_control"))
    return json.dumps([parts["tools"], parts["system"][: marked + 1]], sort_keys=True).encode()


def _ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q * 100) - 1] * 1000 if len(values) > 1 else values[0] * 1000


async def measure(size: int) -> dict[str, float]:
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    prompts = prompt_library(settings.agent_prompts_dir)
    warehouse = generate(size)
    started = time.perf_counter()
    view = view_of(warehouse.tables, settings)
    build_s = time.perf_counter() - started
    prefix = RequestPrefix(prompts, FixedSchema(view), max_rows=settings.max_rows, chart_max_rows=5_000)
    shuffled = list(generate(size).tables)
    random.Random(1).shuffle(shuffled)
    rebuilt = RequestPrefix(
        prompts, FixedSchema(view_of(shuffled, settings)), max_rows=settings.max_rows, chart_max_rows=5_000
    )

    hashes, retrieved_tokens, search_s, details_s, recalls = set(), [], [], [], []
    catalog = view.catalog
    assert catalog is not None, "the warehouse fits the budget whole; nothing to measure"
    for question, needed in warehouse.questions:
        for source in (prefix, rebuilt):
            hashes.add(hashlib.sha256(_prefix_bytes(await source.parts("web"))).hexdigest())
        retrieved_tokens.append(len(await prefix.retrieved(question)) // 4)
        started = time.perf_counter()
        found = catalog.search(question, 5)
        search_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        catalog.details(needed[:1])
        details_s.append(time.perf_counter() - started)
        recalls.append(len(set(needed) & set(found)) / len(needed))
    parts = await prefix.parts("web")
    return {
        "tables": len(warehouse.tables),
        "columns": sum(len(t.columns) for t in warehouse.tables),
        "prompt_tokens": estimate_tokens(parts["system"], parts["tools"], []),
        "whole_schema_tokens": len(render_schema(warehouse.tables)) // 4,
        "listed": len(catalog.render(settings.schema_catalogue_max_chars).listed),
        "retrieved_tokens_max": max(retrieved_tokens),
        "prefixes": len(hashes),
        "index_ms": build_s * 1000,
        "search_p50_ms": _ms(search_s, 0.5),
        "search_p95_ms": _ms(search_s, 0.95),
        "details_p50_ms": _ms(details_s, 0.5),
        "recall_at_5": statistics.mean(recalls),
        "questions": len(recalls),
    }


def run(sizes: tuple[int, ...] = SIZES) -> list[dict[str, float]]:
    return [asyncio.run(measure(size)) for size in sizes]


_CREATE = """
import json, sys, chdb
conn = chdb.connect(sys.argv[1])
for statement in json.loads(sys.stdin.read()):
    conn.query(statement)
conn.close()
"""


async def through_the_engine(size: int) -> dict[str, float]:
    """The same warehouse created (empty) in the embedded engine and introspected by the app, as the
    agent does at start: what the catalogue and the lookup read is what introspection found."""
    warehouse = generate(size)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "clickhouse"
        statements = json.dumps(ddl(warehouse.tables))
        subprocess.run([sys.executable, "-c", _CREATE, str(path)], input=statements, text=True, check=True)
        databases = sorted({t.database for t in warehouse.tables})
        settings = Settings(_env_file=None, clickhouse_url=f"chdb://{path}", clickhouse_databases=databases)  # type: ignore[call-arg]
        db = open_database(settings)
        try:
            started = time.perf_counter()
            view = await SchemaCache(db, settings.schema_max_chars, 0, settings.schema_catalogue_max_chars).view()
            introspect_s = time.perf_counter() - started
        finally:
            await db.close()
    assert view.catalog is not None
    recalls = [
        len(set(needed) & set(view.catalog.search(question, 5))) / len(needed)
        for question, needed in warehouse.questions
    ]
    return {"tables": view.tables, "introspect_s": introspect_s, "recall_at_5": statistics.mean(recalls)}


def report(figures: list[dict[str, float]]) -> None:
    print("\nbench_catalog: schema at any size (default budgets; tokens estimated at 4 characters each)")
    print(
        f"{'tables':>7} {'columns':>8} {'whole schema':>12} {'prompt tok':>10} {'listed':>7} {'+retrieved':>10} "
        f"{'prefixes':>8} "
        f"{'index':>9} {'search p50/p95':>15} {'details':>8} {'recall@5':>8}"
    )
    for f in figures:
        print(
            f"{f['tables']:>7,} {f['columns']:>8,} {f['whole_schema_tokens']:>12,} {f['prompt_tokens']:>10,} "
            f"{f['listed']:>7,} "
            f"{f['retrieved_tokens_max']:>10,} {f['prefixes']:>8} {f['index_ms']:>7.0f}ms "
            f"{f['search_p50_ms']:>6.2f}/{f['search_p95_ms']:.2f}ms {f['details_p50_ms']:>6.2f}ms "
            f"{f['recall_at_5']:>8.3f}"
        )
    print(
        f"({figures[0]['questions']} questions; 'whole schema': the tokens every table whole would take; "
        "'prefixes': distinct cached prefixes over questions and rebuilds)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="table counts, comma-separated")
    parser.add_argument("--engine", type=int, metavar="N", help="also create N tables in chdb and introspect them")
    arguments = parser.parse_args()
    report(run(tuple(int(size) for size in arguments.sizes.split(","))))
    if arguments.engine:
        figures = asyncio.run(through_the_engine(arguments.engine))
        print(
            f"through the engine: {figures['tables']:,} tables introspected and indexed in "
            f"{figures['introspect_s']:.1f} s; recall@5 {figures['recall_at_5']:.3f}"
        )
