"""Approved proposals written into the team's knowledge files, as text appended to the file (so the
team's comments and layout stay, and the change reads as a plain diff in review)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from agent import safe_yaml
from agent.knowledge.files import load_directory

VERIFIED_FILE, APPROVED_FILE = "verified_queries.yaml", "approved_queries.yaml"
_SLUG = re.compile(r"[a-z0-9]+")


def verified_query(
    directory: Path, *, question: str, sql: str, verified_by: str, verified_at: str, source: str
) -> dict[str, str]:
    """The entry an approved query becomes, exactly as it will be written: an id no entry of the folder
    has, the question on one line. `sql` is ClickHouse's canonical text of the query (`canonical_sql`):
    no comments, so nothing the model wrote beside the statement reaches the team's prompt."""
    taken = {e.name for e in load_directory(directory) if e.kind == "verified_queries"} if directory.is_dir() else set()
    slug = "-".join(_SLUG.findall(question.lower())[:6]) or "query"
    entry_id, n = slug, 2
    while entry_id in taken:
        entry_id, n = f"{slug}-{n}", n + 1
    return {
        "id": entry_id,
        "question": " ".join(question.split()),
        "sql": sql.strip(),
        "verified_by": " ".join(verified_by.split()),
        "verified_at": verified_at,
        "source": source,
    }


def append_verified_query(directory: Path, entry: dict[str, str]) -> Path:
    """Append one verified query (from `verified_query`); returns the file. It goes into
    verified_queries.yaml when that file holds nothing else (or does not exist), otherwise into
    approved_queries.yaml."""
    directory.mkdir(parents=True, exist_ok=True)
    path = target_file(directory)
    append_to_list(path, "verified_queries", entry, header="verified_queries:\n")
    return path


def as_yaml(item: dict[str, Any]) -> str:
    """The text `append_to_list` appends for `item` (before the file's own indentation)."""
    return yaml.dump([item], Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


class _Dumper(yaml.SafeDumper):
    """Safe YAML that writes text of several lines as a literal block (`|`), as a person would: SQL reads
    in the file, and in its diff, as it runs."""


def _text(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _text)


def append_to_list(path: Path, section: str, item: dict[str, Any], *, header: str) -> None:
    """Append `item` to the list under `section` of a YAML file, as text (the file's comments and layout
    stay) indented as the file indents its list; if no indentation loads as the list plus `item` (a flow
    list `[]`, say), the document is written anew. Nothing is written unless it loads back with `item`
    last, and the file is replaced whole, so a failure leaves it as it was."""
    text = safe_yaml.read_text(path) if path.exists() else ""
    if not text.strip():
        text = header
    if not text.endswith("\n"):
        text += "\n"
    dumped = as_yaml(item)
    for indent in ("  ", ""):
        candidate = text + "".join(f"{indent}{line}" if line.strip() else line for line in dumped.splitlines(True))
        if _ends_with(candidate, section, item):
            break
    else:
        document = safe_yaml.load(text) or {}
        document[section] = [*(document.get(section) or []), item]
        candidate = yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
        if not _ends_with(candidate, section, item):
            raise ValueError(f"{path}: could not add to {section}")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(candidate, encoding="utf-8")
    os.replace(temporary, path)


def _ends_with(text: str, section: str, item: dict[str, Any]) -> bool:
    try:
        document = safe_yaml.load(text)
    except (yaml.YAMLError, RecursionError):
        return False
    items = document.get(section) if isinstance(document, dict) else None
    return isinstance(items, list) and bool(items) and items[-1] == item


def target_file(directory: Path) -> Path:
    """The file an approved query goes to (see `append_verified_query`)."""
    for name in (VERIFIED_FILE, APPROVED_FILE):
        path = directory / name
        if not path.exists():
            return path
        document = safe_yaml.load(safe_yaml.read_text(path)) or {}
        if isinstance(document, dict) and set(document) <= {"verified_queries"}:
            return path
    raise ValueError(f"{directory}: {VERIFIED_FILE} and {APPROVED_FILE} hold other sections; cannot append")
