"""Retrieval on real schemas: does the lookup's search find the tables a real question needs?

The schemas and questions are public text-to-SQL sets (BIRD's dev set, Spider 1.0, BEAVER; see
benchmarks/real_schemas/README.md): real table and column names, the sources' column descriptions
as comments, and the tables each question needs taken from its reference SQL. The tables are created
(empty) in the embedded engine under their real names, with types mapped to ClickHouse's and their
comments, and introspected by the app as it does at start; then, for the project's search and for a
plain BM25 over one document per table (name, columns and comments, no field weights, no folding),
in the same run:

- recall@5: the share of a question's needed tables among the first five hits;
- all@10: the share of questions whose needed tables are all among the first ten;
- best: what a perfect search would score, below 1 where questions need more than five (or ten) tables;
- columns: the share of the columns the reference SQL names that a person (or the model) sees after
  looking up the needed tables with `lookup_schema` (the details, cut where the tool cuts them).

Each figure is for every database alone (averaged over databases, and the worst one), and for one
pooled scope of every database (1,400 tables). Databases are split by a hash of their name into a
development part and a held-out part (a third) that nothing was tuned on; both are reported.

    python -m benchmarks.bench_retrieval_real [--quick] [--data DIR] [--misses DB,...]

`--quick` takes BEAVER's databases and a few of the others (about a minute on two cores); `--data`
keeps the created engine folder there and reuses it next time; `--misses` prints, for those databases
(development ones only: the held-out part is not for reading), each question whose needed tables are
not all in the first five hits of its own database's search, with the first ten.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.config import Settings
from agent.db import open_database
from agent.limits import cut_text
from agent.schema import Catalog, SchemaCache, Table

DATA = Path(__file__).parent / "real_schemas"
QUICK = ("beaver", ("california_schools", "financial", "formula_1", "concert_singer", "world_1", "car_1"))
LARGE = 20  # tables: the databases reported one by one


@dataclass
class Question:
    source: str
    db: str
    question: str
    tables: list[str]
    columns: list[str]

    def heldout(self) -> bool:
        return is_heldout(self.db)


def is_heldout(database: str) -> bool:
    return int(hashlib.sha1(database.encode()).hexdigest(), 16) % 3 == 0


def load(quick: bool) -> tuple[dict[str, dict[str, Any]], list[Question]]:
    """The databases (name -> tables) and their questions; `quick`: a subset."""
    by_source = json.loads((DATA / "schemas.json").read_text())
    schemas = {db: tables for source in by_source.values() for db, tables in source.items()}
    questions = [Question(**q) for q in json.loads((DATA / "questions.json").read_text())]
    if quick:
        keep = set(by_source[QUICK[0]]) | set(QUICK[1])
        schemas = {db: tables for db, tables in schemas.items() if db in keep}
        questions = [q for q in questions if q.db in keep]
    return schemas, questions


_TYPES = (
    (("int", "number", "bit", "serial"), "Int64"),
    (("real", "float", "double", "decimal", "numeric"), "Float64"),
    (("datetime", "timestamp"), "DateTime"),
    (("date",), "Date"),
    (("bool",), "Bool"),
)


def clickhouse_type(source_type: str) -> str:
    lowered = source_type.lower()
    for words, mapped in _TYPES:
        if lowered.startswith(words):
            return mapped
    return "String"


def _quoted(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def ddl(schemas: dict[str, dict[str, Any]]) -> list[str]:
    statements = []
    for db, tables in sorted(schemas.items()):
        statements.append(f"CREATE DATABASE IF NOT EXISTS {_quoted(db)}")
        for name, table in sorted(tables.items()):
            columns = ", ".join(
                f"{_quoted(c)} {clickhouse_type(t)}" + (f" COMMENT {_literal(note)}" if note else "")
                for c, t, note in table["columns"]
            )
            comment = f" COMMENT {_literal(table['comment'])}" if table["comment"] else ""
            statements.append(
                f"CREATE TABLE IF NOT EXISTS {_quoted(db)}.{_quoted(name)} ({columns}) "
                f"ENGINE = MergeTree ORDER BY tuple(){comment}"
            )
    return statements


_CREATE = """
import json, sys, chdb
conn = chdb.connect(sys.argv[1])
for statement in json.loads(sys.stdin.read()):
    conn.query(statement)
conn.close()
"""


async def introspected(schemas: dict[str, dict[str, Any]], folder: Path) -> list[Table]:
    """The tables created in the embedded engine (once per folder) and read back by the app."""
    path = folder / "clickhouse"
    if not path.exists():
        statements = json.dumps(ddl(schemas))
        subprocess.run([sys.executable, "-c", _CREATE, str(path)], input=statements, text=True, check=True)
    settings = Settings(_env_file=None, clickhouse_url=f"chdb://{path}", clickhouse_databases=sorted(schemas))  # type: ignore[call-arg]
    db = open_database(settings)
    try:
        view = await SchemaCache(db, settings.schema_max_chars, 0, settings.schema_catalogue_max_chars).view()
        assert view.catalog is not None
        return [t for t in view.catalog.tables() if t.database in schemas]
    finally:
        await db.close()


# --- the baseline: plain BM25, one document per table ---

_SPLIT = re.compile(r"(?<=[a-z])(?=[A-Z])")


def plain_terms(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", _SPLIT.sub(" ", text).lower())


class PlainBM25:
    def __init__(self, tables: Sequence[Table], k1: float = 1.2, b: float = 0.75) -> None:
        self._keys = [t.qualified for t in tables]
        self._docs = [Counter(plain_terms(_document(t))) for t in tables]
        self._lengths = [sum(d.values()) for d in self._docs]
        self._average = statistics.mean(self._lengths) if self._lengths else 1.0
        frequency: Counter[str] = Counter(term for d in self._docs for term in d)
        total = len(self._docs)
        self._idf = {t: math.log(1 + (total - n + 0.5) / (n + 0.5)) for t, n in frequency.items()}
        self._k1, self._b = k1, b

    def search(self, text: str, limit: int) -> list[str]:
        query = set(plain_terms(text))
        scores = []
        for i, doc in enumerate(self._docs):
            norm = self._k1 * (1 - self._b + self._b * self._lengths[i] / self._average)
            score = sum(self._idf[t] * doc[t] * (self._k1 + 1) / (doc[t] + norm) for t in query if t in doc)
            if score > 0:
                scores.append((-score, self._keys[i]))
        return [key for _, key in sorted(scores)[:limit]]


def _document(table: Table) -> str:
    return " ".join([table.name, table.comment] + [f"{c.name} {c.comment}" for c in table.columns])


# --- the measures ---


@dataclass
class Figures:
    recall5: list[float] = field(default_factory=list)
    all10: list[float] = field(default_factory=list)
    columns: list[float] = field(default_factory=list)
    best5: list[float] = field(default_factory=list)  # what a perfect search scores: five hits hold five tables
    best10: list[float] = field(default_factory=list)

    def add(self, question: Question, found: list[list[str]], visible: float | None) -> None:
        """`found`: the hits, best first, each the tables it stands for (a family of split tables)."""
        needed = {f"{question.db}.{t}" for t in question.tables}
        self.recall5.append(len(needed & {t for hit in found[:5] for t in hit}) / len(needed))
        self.all10.append(float(needed <= {t for hit in found[:10] for t in hit}))
        self.best5.append(min(5, len(needed)) / len(needed))
        self.best10.append(float(len(needed) <= 10))
        if visible is not None:
            self.columns.append(visible)

    def means(self) -> tuple[float, float, float]:
        return (
            statistics.mean(self.recall5),
            statistics.mean(self.all10),
            statistics.mean(self.columns) if self.columns else math.nan,
        )


def columns_visible(catalog: Catalog, question: Question, max_chars: int) -> float | None:
    """The share of the question's columns that the lookup of its tables shows (as the tool cuts it)."""
    if not question.columns:
        return None
    names = [f"{question.db}.{t}" for t in question.tables]
    text = cut_text(catalog.details(names, max_chars=max_chars - 100), max_chars)
    shown = set(re.findall(r"^\| (.+?) \|", text, flags=re.MULTILINE))
    return sum(1 for c in question.columns if c.split(".", 1)[1] in shown) / len(question.columns)


def project(catalog: Catalog) -> Callable[[str], list[list[str]]]:
    return lambda text: [catalog.family(hit) for hit in catalog.search(text, 10)]


def baseline(plain: PlainBM25) -> Callable[[str], list[list[str]]]:
    return lambda text: [[hit] for hit in plain.search(text, 10)]


def measure(tables: list[Table], questions: list[Question], max_chars: int) -> dict[str, Any]:
    """Per database (each its own scope) and pooled (one scope of every table), project and BM25."""
    by_db: dict[str, list[Table]] = defaultdict(list)
    for table in tables:
        by_db[table.database].append(table)
    per_db: dict[tuple[str, str], Figures] = defaultdict(Figures)
    for db, own in by_db.items():
        catalog = Catalog(own, db)
        ours, theirs = project(catalog), baseline(PlainBM25(own))
        for question in (q for q in questions if q.db == db):
            visible = columns_visible(catalog, question, max_chars)
            per_db[(db, "project")].add(question, ours(question.question), visible)
            per_db[(db, "bm25")].add(question, theirs(question.question), None)
    pooled: dict[tuple[bool, str], Figures] = defaultdict(Figures)
    costs: dict[str, list[float]] = {}  # method -> [build seconds, search seconds over all questions]
    builders: dict[str, Callable[[], Callable[[str], list[list[str]]]]] = {
        "project": lambda: project(Catalog(tables, "default")),
        "bm25": lambda: baseline(PlainBM25(tables)),
    }
    for method, build in builders.items():
        started = time.perf_counter()
        search = build()
        costs[method] = [time.perf_counter() - started, 0.0]
        for question in questions:
            started = time.perf_counter()
            found = search(question.question)
            costs[method][1] += time.perf_counter() - started
            pooled[(question.heldout(), method)].add(question, found, None)
    sizes = {db: len(own) for db, own in by_db.items()}
    return {
        "per_db": per_db,
        "pooled": pooled,
        "tables": len(tables),
        "questions": len(questions),
        "sizes": sizes,
        "costs": costs,
    }


def run(quick: bool = False, data: Path | None = None) -> dict[str, Any]:
    schemas, questions = load(quick)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    if data is not None:
        data.mkdir(parents=True, exist_ok=True)
        tables = asyncio.run(introspected(schemas, data))
    else:
        with tempfile.TemporaryDirectory() as scratch:
            tables = asyncio.run(introspected(schemas, Path(scratch)))
    return measure(tables, questions, settings.max_result_chars)


def _row(label: str, figures: Sequence[Figures]) -> str:
    """Means over the databases (or the one pooled set) of each measure, and the worst database's."""
    means = [f.means() for f in figures]
    cells = []
    for i in range(3):
        values = [m[i] for m in means if not math.isnan(m[i])]
        if not values:
            cells.append(f"{'-':>15}")
            continue
        worst = f" (min {min(values):.2f})" if len(values) > 1 else ""
        cells.append(f"{statistics.mean(values):>5.3f}{worst:>10}")
    return f"{label:<34} " + " ".join(cells)


def report(figures: dict[str, Any]) -> None:
    per_db, pooled = figures["per_db"], figures["pooled"]
    databases = sorted({db for db, _ in per_db})
    print(f"\nbench_retrieval_real: {figures['tables']:,} real tables, {figures['questions']:,} questions")
    print(f"{'scope':<34} {'recall@5':>15} {'all@10':>15} {'columns':>15}")
    for part, heldout in (("development", False), ("held-out", True)):
        dbs = [db for db in databases if is_heldout(db) == heldout]
        for method in ("project", "bm25"):
            print(_row(f"per database, {part}, {method} ({len(dbs)})", [per_db[(db, method)] for db in dbs]))
    for part, heldout in (("development", False), ("held-out", True)):
        for method in ("project", "bm25"):
            n = len(pooled[(heldout, method)].recall5)
            print(_row(f"pooled, {part}, {method} ({n} q)", [pooled[(heldout, method)]]))
    _costs(figures["costs"], figures["tables"], figures["questions"])
    _weak(per_db, databases, figures["sizes"])
    print(f"\nthe databases of {LARGE} tables or more (project / bm25; best: what a perfect search scores)")
    for db in databases:
        project, plain = per_db[(db, "project")], per_db[(db, "bm25")]
        if figures["sizes"][db] >= LARGE:
            p, b = project.means(), plain.means()
            mark = ", held out" if is_heldout(db) else ""
            print(
                f"  {db:<22} {figures['sizes'][db]:>4} tables, {len(project.recall5):>3} questions{mark:<10}  "
                f"recall@5 {p[0]:.2f} / {b[0]:.2f} (best {statistics.mean(project.best5):.2f})  "
                f"all@10 {p[1]:.2f} / {b[1]:.2f} (best {statistics.mean(project.best10):.2f})  columns {p[2]:.2f}"
            )


def _costs(costs: dict[str, list[float]], tables: int, questions: int) -> None:
    """What the pooled scope costs: building the search once, and each question's search."""
    (ours_build, ours_search), (plain_build, plain_search) = costs["project"], costs["bm25"]
    print(
        f"\ncost over the pooled {tables:,} tables (project / bm25): build {ours_build:.2f} s / {plain_build:.2f} s "
        f"(x{ours_build / plain_build:.1f}), search {1000 * ours_search / questions:.2f} ms / "
        f"{1000 * plain_search / questions:.2f} ms a question (x{ours_search / plain_search:.1f})"
    )


def _weak(per_db: dict[tuple[str, str], Figures], databases: list[str], sizes: dict[str, int]) -> None:
    """The development databases under the goal (0.9) on either measure, by themselves."""
    weak = [db for db in databases if not is_heldout(db) and min(per_db[(db, "project")].means()[:2]) < 0.9]
    print(f"\nthe development databases under 0.9 (project / bm25): {len(weak)}")
    for db in weak:
        p, b = per_db[(db, "project")].means(), per_db[(db, "bm25")].means()
        best = statistics.mean(per_db[(db, "project")].best5)
        print(
            f"  {db:<22} {sizes[db]:>4} tables, {len(per_db[(db, 'project')].recall5):>3} questions  "
            f"recall@5 {p[0]:.2f} / {b[0]:.2f} (best {best:.2f})  all@10 {p[1]:.2f} / {b[1]:.2f}"
        )


def misses(databases: Sequence[str], data: Path | None) -> None:
    """Each question of these (development) databases short of what a perfect search scores at five."""
    schemas, questions = load(False)
    kept = {db: schemas[db] for db in databases if db in schemas and not is_heldout(db)}
    with tempfile.TemporaryDirectory() as scratch:
        tables = asyncio.run(introspected(kept, data or Path(scratch)))
    for db in kept:
        catalog = Catalog([t for t in tables if t.database == db], db)
        asked = [q for q in questions if q.db == db]
        short = 0
        for question in asked:
            hits = catalog.search(question.question, 10)
            found = {t.split(".", 1)[1] for hit in hits[:5] for t in catalog.family(hit)}
            if len(found & set(question.tables)) < min(5, len(question.tables)):
                short += 1
                print(f"\n{question.question}\n  needs {', '.join(sorted(question.tables))}")
                print("  found " + ", ".join(("*" if h.split(".", 1)[1] in question.tables else "") + h for h in hits))
        print(f"\n{db}: {short} of {len(asked)} questions short of the best at five")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="BEAVER's databases and a few others")
    parser.add_argument("--data", type=Path, help="keep (and reuse) the engine's data folder here")
    parser.add_argument("--misses", help="development databases (comma-separated) whose misses to print")
    arguments = parser.parse_args()
    if arguments.misses:
        misses(arguments.misses.split(","), arguments.data)
    else:
        report(run(arguments.quick, arguments.data))
