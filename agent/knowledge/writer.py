"""Approved proposals written into the team's knowledge files, as text appended to the file (so the
team's comments and layout stay, and the change reads as a plain diff in review)."""

from __future__ import annotations

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
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if not text.strip():
        text = "verified_queries:\n"
    if not text.endswith("\n"):
        text += "\n"
    path.write_text(text + _indented(entry), encoding="utf-8")
    return path, entry_id


def _target(directory: Path) -> Path:
    for name in (VERIFIED_FILE, APPROVED_FILE):
        path = directory / name
        if not path.exists():
            return path
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if isinstance(document, dict) and set(document) <= {"verified_queries"}:
            return path
    raise ValueError(f"{directory}: {VERIFIED_FILE} and {APPROVED_FILE} hold other sections; cannot append")


def _indented(entry: dict[str, Any]) -> str:
    text = yaml.safe_dump([entry], sort_keys=False, allow_unicode=True, width=100, default_style=None)
    return "".join(f"  {line}" if line.strip() else line for line in text.splitlines(keepends=True))
