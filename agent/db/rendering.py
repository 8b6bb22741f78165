"""Values exactly as ClickHouse prints them, cut before Python ever holds them whole.

The statements here wrap a checked query; ClickHouse renders every cell with its own text output
format (`formatRowNoNewline('TSVRaw', x)`: byte for byte what its TSVRaw output prints, unlike
`toString`, which drops a FixedString's trailing zero bytes) and cuts long cells itself, so one
result costs this process about rows x columns x MAX_CELL_CHARS whatever the engine produced.
JSON callers get numbers where the text is an exact number and strings otherwise.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

Cell = str | None

_WRAPPER = re.compile(r"(Nullable|LowCardinality)\((.*)\)$")
_INTEGER = re.compile(r"U?Int(8|16|32|64|128|256)$")
_FLOAT = re.compile(r"(B?Float(16|32|64))$")
_SAFE_INTEGER = 2**53
TSV_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "0": "\0", "a": "\a", "v": "\v", "e": "\x1b"}
_TSV_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


@dataclass(frozen=True)
class Rendered:
    rows: list[list[Cell]]
    totals: list[Cell] | None
    rows_before_limit: int | None


def capped_select(canonical: str, *, limit: int, max_cell_chars: int, hexed: bool = True) -> str:
    """`canonical` with every cell rendered by ClickHouse and cut to `max_cell_chars` characters."""
    n, b = int(max_cell_chars), 4 * int(max_cell_chars)
    text = "x -> if(isNull(x), NULL, formatRowNoNewline('TSVRaw', x))"
    # Cut by characters and by bytes: lengthUTF8 does not count bytes that are not valid UTF-8.
    kept = f"leftUTF8(substring(s, 1, {b}), {n})"
    more = (
        f"if(lengthUTF8(s) > {n}, concat(toString(lengthUTF8(s) - {n}), ' chars'), "
        f"concat(toString(length(s) - length({kept})), ' bytes'))"
    )
    cut = f"s -> if(length(s) > {b} OR lengthUTF8(s) > {n}, concat({kept}, '…[+', {more}, ']'), s)"
    # hex: the bytes arrive exactly (a JSON writer would fold invalid UTF-8 its own way). The newlines
    # keep a statement's last line from reaching the closing bracket.
    carry = " APPLY(hex)" if hexed else ""
    return f"SELECT * APPLY({text}) APPLY({cut}){carry} FROM (\n{canonical}\n) LIMIT {int(limit)}"


def export_select(canonical: str, *, limit: int, max_cell_chars: int) -> str:
    """ClickHouse's text of every cell (cut at `max_cell_chars`), for a download."""
    return capped_select(canonical, limit=limit, max_cell_chars=max_cell_chars, hexed=False)


async def bounded(chunks: AsyncIterator[bytes], max_bytes: int) -> AsyncIterator[bytes]:
    """Chunks until `max_bytes` have passed; the engine stops when the consumer does."""
    seen = 0
    async for chunk in chunks:
        seen += len(chunk)
        yield chunk
        if seen >= max_bytes:
            return


def describe(canonical: str) -> str:
    return f"DESCRIBE (\n{canonical}\n)"


def parse_compact(raw: bytes) -> Rendered:
    """ClickHouse's JSONCompact output of a capped select (every cell hex of its text, or null)."""
    document = json.loads(raw)
    totals = document.get("totals")
    return Rendered(
        rows=[[_cell(v) for v in row] for row in document.get("data", [])],
        totals=[_cell(v) for v in totals] if isinstance(totals, list) else None,
        rows_before_limit=document.get("rows_before_limit_at_least"),
    )


def _cell(value: Any) -> Cell:
    return None if value is None else bytes.fromhex(str(value)).decode("utf-8", errors="replace")


async def tsv_rows(chunks: AsyncIterator[bytes]) -> AsyncIterator[list[Cell]]:
    """Rows of ClickHouse's TabSeparated output as they arrive, unescaped (`\\N` is NULL)."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield [_tsv_cell(field) for field in line.decode("utf-8", errors="replace").split("\t")]
    if pending:
        yield [_tsv_cell(field) for field in pending.decode("utf-8", errors="replace").split("\t")]


def _tsv_cell(text: str) -> Cell:
    if text == "\\N":
        return None
    return _TSV_ESCAPE.sub(lambda m: TSV_ESCAPES.get(m.group(1), m.group(1)), text)


def base_type(ch_type: str) -> str:
    while match := _WRAPPER.match(ch_type):
        ch_type = match.group(2)
    return ch_type


def is_numeric(ch_type: str) -> bool:
    base = base_type(ch_type)
    return bool(_INTEGER.match(base) or _FLOAT.match(base) or base.startswith("Decimal"))


def json_value(text: Cell, ch_type: str) -> Any:
    """A JSON-safe value: a number where ClickHouse's text is an exact JSON number, else the text."""
    if text is None:
        return None
    base = base_type(ch_type)
    if _INTEGER.match(base):
        try:
            number = int(text)
        except ValueError:
            return text
        return number if abs(number) < _SAFE_INTEGER else text
    if _FLOAT.match(base):
        try:
            real = float(text)
        except ValueError:
            return text
        return real if math.isfinite(real) else text
    if base == "Bool":
        return {"true": True, "false": False}.get(text, text)
    return text
