"""A query's full result as CSV: ClickHouse's text for every value, formula-escaped for spreadsheets."""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass

from agent.db.rendering import Cell, is_numeric

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class Column:
    name: str
    type: str


@dataclass(frozen=True)
class Export:
    columns: list[Column]
    rows: AsyncGenerator[list[Cell], None]


async def started(export: Export) -> Export:
    """The export with its first row already fetched: a statement that fails at once raises here, while
    a caller can still answer with an error, rather than after a response has begun."""
    rows = export.rows
    try:
        first = await anext(rows)
    except StopAsyncIteration:
        return Export(export.columns, _empty())
    except BaseException:
        await rows.aclose()
        raise
    return Export(export.columns, _chained(first, rows))


async def _chained(first: list[Cell], rest: AsyncGenerator[list[Cell], None]) -> AsyncGenerator[list[Cell], None]:
    async with aclosing(rest):
        yield first
        async for row in rest:
            yield row


async def _empty() -> AsyncGenerator[list[Cell], None]:
    return
    yield


async def csv_chunks(export: Export, *, max_bytes: int) -> AsyncGenerator[bytes, None]:
    """CSV in chunks of about CHUNK_BYTES: a header, then rows, ending at the last whole row within
    `max_bytes` (the engine's query is stopped there). NULL is an empty cell; a text cell or a header
    a spreadsheet would evaluate as a formula gets a leading apostrophe (numbers keep their sign). An
    engine failure is raised, not swallowed: the caller must not end the response as if the file were
    whole."""
    line = _LineWriter()
    text_columns = [not is_numeric(c.type) for c in export.columns]
    header = line([_csv_cell(c.name, True) for c in export.columns])
    pending, size, sent = [header], len(header), 0
    async with aclosing(export.rows) as rows:
        async for row in rows:
            encoded = line([_csv_cell(cell, text) for cell, text in zip(row, text_columns, strict=False)])
            if sent + size + len(encoded) > max_bytes:
                break
            pending.append(encoded)
            size += len(encoded)
            if size >= CHUNK_BYTES:
                yield b"".join(pending)
                sent, pending, size = sent + size, [], 0
                # Encoding is CPU work (the csv writer takes ~40 ns a character) and the engine's pieces
                # arrive faster than it: without a pause here one download holds the loop for as long as
                # the file takes, since sending a chunk need not suspend.
                await asyncio.sleep(0)
    if pending and sent + size <= max_bytes:
        yield b"".join(pending)


class _LineWriter:
    """One CSV line at a time, as UTF-8."""

    def __init__(self) -> None:
        self._buffer = io.StringIO()
        self._writer = csv.writer(self._buffer)

    def __call__(self, cells: list[str]) -> bytes:
        self._buffer.seek(0)
        self._buffer.truncate()
        self._writer.writerow(cells)
        return self._buffer.getvalue().encode()


def _csv_cell(cell: Cell, text: bool) -> str:
    if cell is None:
        return ""
    if text and cell.startswith(_FORMULA_START):
        return "'" + cell
    return cell
