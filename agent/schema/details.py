"""A table's columns for `lookup_schema`, in pages that fit the tool's answer, or filtered by words.

A real table can have 900 columns; cut at the answer's size, the column a question needs may be the
one left out, with nothing to say so. Here each table gets its share of the answer; what does not fit
goes to the next page, and the answer says how many columns were left out and how to ask for them:
the next `page`, or only the columns whose names, descriptions or sampled values match `columns`.
"""

from __future__ import annotations

from agent.lexical import terms
from agent.schema.tables import Column, Table, column_row, table_header

NOTE_ROOM = 300  # what the note on left-out columns takes
MIN_TABLE_CHARS = 800  # however many tables are asked for at once, each shows at least this much


def table_details(table: Table, budget: int, words: str = "", page: int = 1) -> str:
    """The table's header and one page of its columns (those matching `words`, when given), within
    `budget` characters, with a note on what was left out."""
    header = table_header(table)
    wanted = set(terms(words))
    columns = [c for c in table.columns if not wanted or wanted & _column_terms(c)]
    rows = [column_row(c) for c in columns]
    room = max(budget, MIN_TABLE_CHARS) - len(header) - 1
    if sum(len(row) + 1 for row in rows) > room:
        room -= NOTE_ROOM
    pages = _pages(rows, room)
    page = min(max(page, 1), max(len(pages), 1))
    lines = [header, *(pages[page - 1] if pages else [])]
    note = _note(table, len(columns), words, page, pages)
    return "\n".join([*lines, note] if note else lines)


def fair_shares(sizes: list[int], total: int) -> list[int]:
    """Each table's share of an answer of `total` characters: a table that fits takes what it needs,
    and what it leaves goes to the wider ones, in equal parts."""
    shares = [0] * len(sizes)
    left = total
    for place, index in enumerate(sorted(range(len(sizes)), key=lambda i: sizes[i])):
        shares[index] = min(sizes[index], left // (len(sizes) - place))
        left -= shares[index]
    return shares


def _column_terms(column: Column) -> set[str]:
    return set(terms(f"{column.name} {column.comment} {' '.join(column.samples)}"))


def _pages(rows: list[str], budget: int) -> list[list[str]]:
    pages: list[list[str]] = []
    used = budget + 1
    for row in rows:
        if used + len(row) + 1 > budget and (not pages or pages[-1]):
            pages.append([])
            used = 0
        pages[-1].append(row)
        used += len(row) + 1
    return pages


def _note(table: Table, matching: int, words: str, page: int, pages: list[list[str]]) -> str:
    total = len(table.columns)
    if words and not matching:
        return f'(No column of its {total} matches {words!r}; ask without "columns" to page through them all.)'
    filtered = (
        f"{matching} of {total} columns match {words!r}; the other {total - matching} are left out. " if words else ""
    )
    if len(pages) <= 1:
        return f"({filtered.strip()})" if filtered else ""
    first = sum(len(p) for p in pages[: page - 1]) + 1
    last = first + len(pages[page - 1]) - 1
    more = f' Ask again with "page": {page + 1} for the next ones' if page < len(pages) else " This is the last page"
    return (
        f"({filtered}Columns {first}-{last} of {matching} shown (page {page} of {len(pages)}); "
        f'{matching - (last - first + 1)} left out.{more}, or with "columns": "some words" for only the '
        "columns that match them.)"
    )
