"""A team's knowledge as YAML files in one directory, read with the line each entry and field starts on.

Every `*.yaml` file in the directory (not below it) may hold any of four lists:

```yaml
glossary:          # what a word means here
  - term: delayed flight
    synonyms: [late flight, late arrival]
    definition: A flight that arrived 15 or more minutes late.
    table: nycflights13.flights         # needed when `sql` is an expression
    sql: arr_delay >= 15                # optional: an expression over `table`, or a whole SELECT
metrics:           # how a figure is computed
  - name: on-time rate
    description: Share of flights that arrived within 15 minutes.
    sql: countIf(arr_delay < 15) / countIf(arr_delay IS NOT NULL)
    tables: [nycflights13.flights]
    from: ...                           # optional: the FROM clause when it reads several tables
notes:             # which table or column to use, which to avoid, the right join
  - table: nycflights13.flights
    column: dep_time                    # optional
    note: HHMM local time as a number; use time_hour for the hour of departure.
    sql: ...                            # optional: a SELECT showing the right use
verified_queries:  # a question and the SQL that answers it
  - question: Which NYC airport had the most departures in 2013?
    sql: SELECT origin, count() AS n FROM nycflights13.flights GROUP BY origin ORDER BY n DESC
    verified_by: ana
    verified_at: 2026-10-01
```
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent import safe_yaml
from agent.config import ConfigError

KINDS = ("glossary", "metrics", "notes", "verified_queries")
FIELDS = {
    "glossary": ({"term", "definition"}, {"synonyms", "table", "sql"}),
    "metrics": ({"name", "description", "sql", "tables"}, {"from"}),
    "notes": ({"table", "note"}, {"column", "sql"}),
    "verified_queries": ({"question", "sql", "verified_by", "verified_at"}, {"id", "source"}),
}
LIST_FIELDS = frozenset({"synonyms", "tables"})  # every other field is text
_LINE, _LINES = "__line__", "__lines__"


class KnowledgeError(ConfigError):
    """A knowledge file that cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Entry:
    kind: str  # one of KINDS
    name: str  # the term, metric name, table(.column) or question
    fields: dict[str, Any]
    path: Path
    line: int
    lines: dict[str, int] = field(default_factory=dict)  # the line each field starts on

    @property
    def tag(self) -> str:
        """How an answer cites it: [glossary: delayed flight], [metric: on-time rate], ..."""
        label = {"glossary": "glossary", "metrics": "metric", "notes": "note", "verified_queries": "verified"}
        return f"[{label[self.kind]}: {self.name}]"

    def where(self, key: str | None = None) -> str:
        return f"{self.path}:{self.lines.get(key, self.line) if key else self.line}"

    def text(self, key: str) -> str:
        value = self.fields.get(key)
        return "" if value is None else str(value).strip()


class _LineLoader(safe_yaml.Loader):
    """Safe YAML that remembers where each mapping, and each of its values, starts."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        mapping = super().construct_mapping(node, deep=deep)
        mapping[_LINE] = node.start_mark.line + 1
        mapping[_LINES] = {
            key.value: key.start_mark.line + 1 for key, _ in node.value if isinstance(key, yaml.ScalarNode)
        }
        return mapping


def load_directory(directory: Path) -> list[Entry]:
    """Every entry of every YAML file in the directory, in file-name order, then in file order."""
    if not directory.is_dir():
        raise KnowledgeError(f"AGENT_KNOWLEDGE_DIR: {directory} is not a directory.")
    entries: list[Entry] = []
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        entries += load_file(path)
    return entries


def load_file(path: Path) -> list[Entry]:
    try:
        document = safe_yaml.load(safe_yaml.read_text(path), _LineLoader)  # a SafeLoader, within bounds
    except safe_yaml.TooLarge as exc:
        raise KnowledgeError(f"{path}: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        what = "refused" if isinstance(exc, safe_yaml.Unbounded) else "not valid YAML"
        raise KnowledgeError(f"{path}:{line}: {what} ({exc.problem})") from None
    except RecursionError:
        raise KnowledgeError(f"{path}: nested too deeply to read") from None
    except (OSError, UnicodeError, yaml.YAMLError) as exc:
        raise KnowledgeError(f"{path}: cannot be read ({exc})") from None
    if document is None:
        return []
    if not isinstance(document, dict):
        raise KnowledgeError(f"{path}:1: expected a mapping with any of {', '.join(KINDS)}")
    unknown = sorted((k for k in document if k not in (*KINDS, _LINE, _LINES)), key=str)
    if unknown:
        line = document[_LINES].get(unknown[0], 1)
        raise KnowledgeError(f"{path}:{line}: unknown section {unknown[0]!r}; expected {', '.join(KINDS)}")
    entries = []
    for kind in KINDS:
        items = document.get(kind) or []
        if not isinstance(items, list):
            raise KnowledgeError(f"{path}:{document[_LINES][kind]}: {kind} must be a list of entries")
        entries += [_entry(kind, item, path, document[_LINES][kind]) for item in items]
    return entries


def _entry(kind: str, item: Any, path: Path, section_line: int) -> Entry:
    if not isinstance(item, dict):
        raise KnowledgeError(f"{path}:{section_line}: each of {kind} must be a mapping")
    item = dict(item)  # a YAML alias repeats the same mapping: read each use on its own
    line, lines = item.pop(_LINE, section_line), item.pop(_LINES, {})
    if any(not isinstance(key, str) for key in item):
        raise KnowledgeError(f"{path}:{line}: field names of a {kind} entry must be words")
    required, optional = FIELDS[kind]
    if missing := sorted(required - item.keys()):
        raise KnowledgeError(f"{path}:{line}: {kind} entry lacks {', '.join(missing)}")
    if unknown := sorted(item.keys() - required - optional):
        raise KnowledgeError(f"{path}:{lines[unknown[0]]}: unknown field {unknown[0]!r} in a {kind} entry")
    if problem := _not_text(item, required):
        raise KnowledgeError(f"{path}:{lines.get(problem, line)}: `{problem}` must be text (quote it)")
    if kind == "glossary" and "sql" in item and not _is_statement(str(item["sql"])) and "table" not in item:
        raise KnowledgeError(f"{path}:{lines['sql']}: a glossary expression needs `table` (the table it reads)")
    if "synonyms" in item and not _strings(item["synonyms"]):
        raise KnowledgeError(f"{path}:{lines.get('synonyms', line)}: `synonyms` must be a list of words or phrases")
    if kind == "metrics" and not _strings(item["tables"]):
        raise KnowledgeError(f"{path}:{lines['tables']}: `tables` must be a list of database.table names")
    if kind == "verified_queries" and isinstance(item["verified_at"], dt.date):
        item["verified_at"] = item["verified_at"].isoformat()
    name = {
        "glossary": lambda: item["term"],
        "metrics": lambda: item["name"],
        "notes": lambda: ".".join(str(item[k]) for k in ("table", "column") if item.get(k)),
        "verified_queries": lambda: item.get("id") or item["question"],
    }[kind]()
    return Entry(kind, " ".join(str(name).split()), item, path, line, lines)


def _not_text(item: dict[str, Any], required: set[str]) -> str | None:
    """The first field that should be text and is not (a number, a list, a mapping; an alias that
    repeats one). An optional field may be left empty; `verified_at` may be a date YAML read as one."""
    for key, value in item.items():
        if key in LIST_FIELDS or (key == "verified_at" and isinstance(value, dt.date)):
            continue
        if not isinstance(value, str) and not (value is None and key not in required):
            return str(key)
    return None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str | int | float) for v in value)


def _is_statement(sql: str) -> bool:
    return sql.lstrip().lower().startswith(("select", "with", "("))


def statements(entry: Entry) -> list[tuple[str, str | None]]:
    """The SELECTs that check an entry, each with the field a problem names (a None statement: the entry
    cannot be checked as written). A note's or a verified query's SQL, and any SQL written as a whole
    statement, is checked as it is (so a DROP, or a file() behind a comment, is refused as the model's
    would be); an expression is checked inside the SELECT that reads it; the tables an entry names are
    checked too (they are in the prompt)."""
    sql = entry.text("sql")
    checks: list[tuple[str, str | None]] = []
    if sql and (entry.kind in ("notes", "verified_queries") or _is_statement(sql)):
        checks.append(("sql", sql))
    elif sql and entry.kind == "glossary":
        checks.append(("sql", f"SELECT {sql} FROM {entry.text('table')} LIMIT 1"))
    elif sql and entry.kind == "metrics":
        tables = [str(t) for t in entry.fields["tables"]]
        source = entry.text("from") or (tables[0] if len(tables) == 1 else "")
        checks.append(("sql", f"SELECT {sql} FROM {source}") if source else ("tables", None))
    if entry.kind == "glossary" and entry.text("table"):
        checks.append(("table", f"SELECT 1 FROM {entry.text('table')} LIMIT 1"))
    if entry.kind == "metrics":
        checks += [("tables", f"SELECT 1 FROM {table} LIMIT 1") for table in map(str, entry.fields["tables"])]
    if entry.kind == "notes":
        column = entry.text("column")
        checks.append(("column" if column else "table", f"SELECT {column or '*'} FROM {entry.text('table')} LIMIT 1"))
    return checks
