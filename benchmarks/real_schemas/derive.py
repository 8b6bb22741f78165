"""Derive the real-schema benchmark's data (schemas.json, questions.json) from public text-to-SQL sets.

Run once by hand with the sources' own files; the benchmark reads only what this writes:

    python -m benchmarks.real_schemas.derive --bird-tables dev_tables.json --bird-questions dev.json \
        --spider-tables tables.json --spider-questions dev.json \
        --beaver-tables dev_tables.json --beaver-questions dev_dw.json dev_nw.json

Each table keeps its real name, its columns' real names and types, and a comment where the source has
one (BIRD's and Spider's readable column names, kept only where they say more than the name). The
tables a question needs come from its reference SQL, parsed with sqlglot (BEAVER lists them itself);
the columns it needs are the ones the SQL names on those tables.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

HERE = Path(__file__).parent
Schema = dict[str, dict[str, Any]]  # table -> {"comment": str, "columns": [[name, type, comment]]}


def _plain(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def _column_comment(name: str, readable: str) -> str:
    """The source's readable name as a comment, when it is more than the name re-spelled."""
    return "" if _plain(readable) == _plain(re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name)) else readable


def spider_style(databases: list[dict[str, Any]]) -> dict[str, Schema]:
    """Spider's and BIRD's tables.json: per database, tables and (table index, name) column pairs."""
    out: dict[str, Schema] = {}
    for db in databases:
        tables: Schema = {name: {"comment": "", "columns": []} for name in db["table_names_original"]}
        names = db["table_names_original"]
        for (index, name), (_, readable), kind in zip(
            db["column_names_original"], db["column_names"], db["column_types"], strict=True
        ):
            if index < 0:
                continue
            columns = tables[names[index]]["columns"]
            if all(c[0].lower() != name.lower() for c in columns):
                columns.append([name, kind, _column_comment(name, readable)])
        out[db["db_id"]] = tables
    return out


def jar_style(tables: dict[str, dict[str, Any]]) -> dict[str, Schema]:
    """BIRD's dev tables as JAR and BEAVER keep them: one entry per `db#sep#table`."""
    out: dict[str, Schema] = defaultdict(dict)
    for entry in tables.values():
        readable = entry.get("column_names") or entry["column_names_original"]
        columns: list[list[str]] = []
        for name, kind, nice in zip(entry["column_names_original"], entry["column_types"], readable, strict=True):
            if all(c[0].lower() != name.lower() for c in columns):
                columns.append([name, kind.split()[0], _column_comment(name, nice)])
        out[entry["db_id"]][entry["table_name_original"]] = {"comment": "", "columns": columns}
    return dict(out)


def needed(sql: str, schema: Schema, dialect: str) -> tuple[list[str], list[str]]:
    """The tables a reference query reads and the columns it names on them (`table.column`)."""
    tree = sqlglot.parse_one(sql, read=dialect)
    by_lower = {name.lower(): name for name in schema}
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    aliases: dict[str, str] = {}
    tables: list[str] = []
    for table in tree.find_all(exp.Table):
        real = by_lower.get(table.name.lower())
        if real is None or table.name.lower() in ctes:
            continue
        aliases[table.alias_or_name.lower()] = real
        aliases[real.lower()] = real
        if real not in tables:
            tables.append(real)
    columns: list[str] = []
    for column in tree.find_all(exp.Column):
        owners = [aliases[column.table.lower()]] if column.table.lower() in aliases else tables
        for owner in owners:
            match = next((c[0] for c in schema[owner]["columns"] if c[0].lower() == column.name.lower()), None)
            if match is not None and f"{owner}.{match}" not in columns:
                columns.append(f"{owner}.{match}")
                break
    return tables, columns


def questions(source: str, items: list[dict[str, Any]], schemas: dict[str, Schema], dialect: str) -> list[dict]:
    out = []
    for item in items:
        schema = schemas[item["db_id"]]
        sql = item.get("query") or item.get("SQL") or item["sql"]
        try:
            tables, columns = needed(sql, schema, dialect)
        except sqlglot.errors.SqlglotError:
            continue
        if "gold_tables" in item:  # BEAVER names them itself
            tables = [name.split("#sep#")[1] for name in item["gold_tables"]]
            tables = [next((t for t in schema if t.lower() == name.lower()), name) for name in tables]
        if tables and all(t in schema for t in tables):
            out.append(
                {
                    "source": source,
                    "db": item["db_id"],
                    "question": item["question"],
                    "tables": tables,
                    "columns": columns,
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("bird-tables", "bird-questions", "spider-tables", "spider-questions", "beaver-tables"):
        parser.add_argument(f"--{name}", type=Path, required=True)
    parser.add_argument("--beaver-questions", type=Path, nargs="+", required=True)
    args = parser.parse_args()
    bird = jar_style(json.loads(args.bird_tables.read_text()))
    beaver = jar_style(json.loads(args.beaver_tables.read_text()))
    spider = {
        db: s
        for db, s in spider_style(json.loads(args.spider_tables.read_text())).items()
        if db not in bird and db not in beaver
    }  # Spider's copies of BIRD's databases (formula_1) left out
    found = questions("bird", json.loads(args.bird_questions.read_text()), bird, "sqlite")
    found += questions(
        "spider", [q for q in json.loads(args.spider_questions.read_text()) if q["db_id"] in spider], spider, "sqlite"
    )
    for path in args.beaver_questions:
        found += questions("beaver", json.loads(path.read_text()), beaver, "mysql")
    schemas = {"bird": bird, "spider": spider, "beaver": beaver}
    (HERE / "schemas.json").write_text(json.dumps(schemas, separators=(",", ":"), sort_keys=True))
    (HERE / "questions.json").write_text(json.dumps(found, separators=(",", ":")))
    print(
        f"{sum(len(s) for s in schemas.values())} databases, "
        f"{sum(len(t) for s in schemas.values() for t in s.values())} tables, {len(found)} questions"
    )


if __name__ == "__main__":
    main()
