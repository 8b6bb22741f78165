"""A query's full result as CSV: ClickHouse's text for every value, formula-escaped for spreadsheets."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from dataclasses import dataclass

from agent.db.rendering import Cell, is_numeric

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_ROWS_PER_CHUNK = 500


@dataclass(frozen=True)
class Column:
    name: str
    type: str


@dataclass(frozen=True)
class Export:
    columns: list[Column]
    rows: AsyncIterator[list[Cell]]


async def csv_chunks(export: Export) -> AsyncIterator[str]:
    """CSV text in chunks: a header, then rows. NULL is an empty cell; a text cell a spreadsheet would
    evaluate as a formula gets a leading apostrophe (numbers keep their sign)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([c.name for c in export.columns])
    text_columns = [not is_numeric(c.type) for c in export.columns]
    count = 0
    async for row in export.rows:
        writer.writerow([_csv_cell(cell, text) for cell, text in zip(row, text_columns, strict=False)])
        count += 1
        if count % _ROWS_PER_CHUNK == 0:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def _csv_cell(cell: Cell, text: bool) -> str:
    if cell is None:
        return ""
    if text and cell.startswith(_FORMULA_START):
        return "'" + cell
    return cell
