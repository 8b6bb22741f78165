"""Approved proposals written into the team's knowledge files, as text appended to the file (so the
team's comments and layout stay, and the change reads as a plain diff in review)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from agent.knowledge.files import load_directory

VERIFIED_FILE, APPROVED_FILE = "verified_queries.yaml", "approved_queries.yaml"
_SLUG = re.compile(r"[a-z0-9]+")


def append_verified_query(
    directory: Path, *, question: str, sql: str, verified_by: str, verified_at: str, source: str
) -> tuple[Path, str]:
    """Append one verified query; returns the file and the entry's id. It goes into verified_queries.yaml
    when that file holds nothing else (or does not exist), otherwise into approved_queries.yaml."""
    directory.mkdir(parents=True, exist_ok=True)
    taken = {e.name for e in load_directory(directory) if e.kind == "verified_queries"}
    slug = "-".join(_SLUG.findall(question.lower())[:6]) or "query"
    entry_id, n = slug, 2
    while entry_id in taken:
        entry_id, n = f"{slug}-{n}", n + 1
    entry = {
        "id": entry_id,
        "question": " ".join(question.split()),
        "sql": sql.strip(),
        "verified_by": verified_by,
        "verified_at": verified_at,
        "source": source,
    }
    path = _target(directory)
    append_to_list(path, "verified_queries", entry, header="verified_queries:\n")
    return path, entry_id


def append_to_list(path: Path, section: str, item: dict[str, Any], *, header: str) -> None:
    """Append `item` to the list under `section` of a YAML file, as text (the file's comments and layout
    stay) indented as the file indents its list; if no indentation loads as the list plus `item` (a flow
    list `[]`, say), the document is written anew. Nothing is written unless it loads back with `item`
    last, and the file is replaced whole, so a failure leaves it as it was."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if not text.strip():
        text = header
    if not text.endswith("\n"):
        text += "\n"
    dumped = yaml.safe_dump([item], sort_keys=False, allow_unicode=True, width=100, default_style=None)
    for indent in ("  ", ""):
        candidate = text + "".join(f"{indent}{line}" if line.strip() else line for line in dumped.splitlines(True))
        if _ends_with(candidate, section, item):
            break
    else:
        document = yaml.safe_load(text) or {}
        document[section] = [*(document.get(section) or []), item]
        candidate = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
        if not _ends_with(candidate, section, item):
            raise ValueError(f"{path}: could not add to {section}")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(candidate, encoding="utf-8")
    os.replace(temporary, path)


def _ends_with(text: str, section: str, item: dict[str, Any]) -> bool:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    items = document.get(section) if isinstance(document, dict) else None
    return isinstance(items, list) and bool(items) and items[-1] == item


def _target(directory: Path) -> Path:
    for name in (VERIFIED_FILE, APPROVED_FILE):
        path = directory / name
        if not path.exists():
            return path
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if isinstance(document, dict) and set(document) <= {"verified_queries"}:
            return path
    raise ValueError(f"{directory}: {VERIFIED_FILE} and {APPROVED_FILE} hold other sections; cannot append")
