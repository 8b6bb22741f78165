"""Values exactly as ClickHouse prints them, cut before Python ever holds them whole.

The statements here wrap a checked query; ClickHouse renders every cell with its own text output
format (`formatRowNoNewline('TSVRaw', x)`: byte for byte what its TSVRaw output prints, unlike
`toString`, which drops a FixedString's trailing zero bytes) and cuts long cells itself, so one
result costs this process about rows x columns x MAX_CELL_CHARS whatever the engine produced.
JSON callers get numbers where the text is an exact number and strings otherwise.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

Cell = str | None

# Type names are a query's to choose (an Enum's, a Tuple's field names) and may be long: plain string
# checks, no patterns.
_WRAPPERS = ("Nullable(", "LowCardinality(")
_INTEGERS = frozenset(f"{sign}Int{bits}" for sign in ("", "U") for bits in (8, 16, 32, 64, 128, 256))
_FLOATS = frozenset(f"{prefix}Float{bits}" for prefix in ("", "B") for bits in (16, 32, 64))
_SAFE_INTEGER = 2**53
TSV_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "0": "\0", "a": "\a", "v": "\v", "e": "\x1b"}


@dataclass(frozen=True)
class Rendered:
    rows: list[list[Cell]]
    totals: list[Cell] | None


# The output format of a capped select: no column names in it (names are the query's, or the data's,
# to choose, and DESCRIBE reads them within a cap), and every cell `x`, the hex of its text, and its lengths.
CAPPED_FORMAT = "TabSeparated"


_TEXT = "x -> if(isNull(x), NULL, formatRowNoNewline('TSVRaw', x))"


def capped_select(canonical: str, *, limit: int, max_cell_chars: int) -> str:
    """`canonical` with every cell rendered by ClickHouse, as `x`, the hex of its text (its first
    `max_cell_chars` characters when it is cut), and its whole length in characters and in bytes
    (`parse_capped` marks the cut, by the same test as `export_select`)."""
    n, b = int(max_cell_chars), 4 * int(max_cell_chars)
    # Cut by characters and by bytes: lengthUTF8 does not count bytes that are not valid UTF-8. hex: the
    # bytes arrive exactly (a text writer would fold invalid UTF-8 its own way); the `x` keeps a row of
    # one empty cell from being the empty line before the totals. The mark is written in Python: as an
    # expression the engine analyses it for every column, at 2-3 ms a column, more than most queries
    # cost. The newlines keep a statement's last line from reaching the closing bracket.
    kept = f"hex(if(length(s) > {b} OR lengthUTF8(s) > {n}, leftUTF8(substring(s, 1, {b}), {n}), s))"
    cell = f"s -> concat('x', {kept}, ':', toString(lengthUTF8(s)), ':', toString(length(s)))"
    return f"SELECT * APPLY({_TEXT}) APPLY({cell}) FROM (\n{canonical}\n) LIMIT {int(limit)}"


def export_select(canonical: str, *, limit: int, max_cell_chars: int) -> str:
    """ClickHouse's text of every cell, for a download: cut at `max_cell_chars` and marked as
    `parse_capped` marks a cell, here by the engine (an export's text is not read back by this process)."""
    n, b = int(max_cell_chars), 4 * int(max_cell_chars)
    kept = f"leftUTF8(substring(s, 1, {b}), {n})"
    more = (
        f"if(lengthUTF8(s) > {n}, concat(toString(lengthUTF8(s) - {n}), ' chars'), "
        f"concat(toString(length(s) - length({kept})), ' bytes'))"
    )
    cut = f"s -> if(length(s) > {b} OR lengthUTF8(s) > {n}, concat({kept}, '…[+', {more}, ']'), s)"
    return f"SELECT * APPLY({_TEXT}) APPLY({cut}) FROM (\n{canonical}\n) LIMIT {int(limit)}"


def describe(canonical: str) -> str:
    return f"DESCRIBE (\n{canonical}\n)"


def parse_capped(raw: bytes, max_cell_chars: int) -> Rendered:
    """The TabSeparated output of a capped select: rows, then (WITH TOTALS) an empty line and the totals.
    No cell is empty (each starts with `x`, or is `\\N`), so the one empty line is the separator, also
    before the totals of no rows."""
    lines = raw.decode("ascii").split("\n")
    if lines[-1] == "":
        lines.pop()
    body, totals = (lines[: lines.index("")], lines[lines.index("") + 1 :]) if "" in lines else (lines, [])
    if len(totals) > 1 or "" in totals:
        raise ValueError("not the output of a capped select")
    rows = [_cells(line, max_cell_chars) for line in body]
    return Rendered(rows=rows, totals=_cells(totals[0], max_cell_chars) if totals else None)


def _cells(line: str, max_cell_chars: int) -> list[Cell]:
    return [None if field == "\\N" else _capped_cell(field, max_cell_chars) for field in line.split("\t")]


def _capped_cell(field: str, max_chars: int) -> str:
    """`x<hex>:<characters>:<bytes>`: the text, and the mark of what was cut from it, decided and counted
    as the engine does in `export_select` (lengthUTF8 and leftUTF8 count bytes that are not UTF-8
    their own ways, so the mark goes by the lengths, not by what was kept)."""
    marker, hexed, characters, size = field[:1], *field[1:].split(":")
    if marker != "x" or not (characters.isdigit() and size.isdigit()):
        raise ValueError("not a capped cell")
    kept = bytes.fromhex(hexed)
    text = kept.decode("utf-8", errors="replace")
    chars, total = int(characters), int(size)
    if total <= 4 * max_chars and chars <= max_chars:
        return text
    more = f"{chars - max_chars} chars" if chars > max_chars else f"{total - len(kept)} bytes"
    return f"{text}…[+{more}]"


async def tsv_rows(chunks: AsyncIterator[bytes]) -> AsyncGenerator[list[Cell], None]:
    """Rows of ClickHouse's TabSeparated output as they arrive, unescaped (`\\N` is NULL). Linear in
    the output: a row split over many chunks is joined once."""
    pending: list[bytes] = []
    async for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            pending.append(chunk[start:end])
            yield _tsv_row(b"".join(pending))
            pending.clear()
            start = end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
    if pending:
        yield _tsv_row(b"".join(pending))


def _tsv_row(line: bytes) -> list[Cell]:
    return [_tsv_cell(field) for field in line.decode("utf-8", errors="replace").split("\t")]


def _tsv_cell(text: str) -> Cell:
    if text == "\\N":
        return None
    if "\\" not in text:
        return text
    pieces: list[str] = []
    start = 0
    while (backslash := text.find("\\", start)) != -1 and backslash + 1 < len(text):
        escaped = text[backslash + 1]
        pieces += (text[start:backslash], TSV_ESCAPES.get(escaped, escaped))
        start = backslash + 2
    pieces.append(text[start:])
    return "".join(pieces)


def base_type(ch_type: str) -> str:
    """The type inside any Nullable(...) and LowCardinality(...) wrappers."""
    start, end = 0, len(ch_type)
    while ch_type.endswith(")", start, end):
        wrapper = next((w for w in _WRAPPERS if ch_type.startswith(w, start, end - 1)), None)
        if wrapper is None:
            break
        start, end = start + len(wrapper), end - 1
    return ch_type[start:end]


def is_numeric(ch_type: str) -> bool:
    base = base_type(ch_type)
    return base in _INTEGERS or base in _FLOATS or base.startswith("Decimal")


def json_value(text: Cell, ch_type: str) -> Any:
    """A JSON-safe value: a number where ClickHouse's text is an exact JSON number, else the text."""
    if text is None:
        return None
    base = base_type(ch_type)
    if base in _INTEGERS:
        try:
            number = int(text)
        except ValueError:
            return text
        return number if abs(number) < _SAFE_INTEGER else text
    if base in _FLOATS:
        try:
            real = float(text)
        except ValueError:
            return text
        return real if math.isfinite(real) else text
    if base == "Bool":
        return {"true": True, "false": False}.get(text, text)
    return text
