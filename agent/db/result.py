"""What one query returns, and how it is shown to the model and serialised to JSON."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from decimal import Decimal
from ipaddress import IPv4Address, IPv6Address
from typing import Any

from pydantic import BaseModel, Field

TRUNCATION_NOTE = "[More rows available - add LIMIT, WHERE or GROUP BY to get exactly what you need]"


class QueryResult(BaseModel):
    query_id: str
    sql: str
    columns: list[str] = Field(default_factory=list)
    types: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    has_more: bool = False
    error: str | None = None
    error_code: int | None = None
    hint: str | None = None
    elapsed_ms: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def json_rows(self) -> list[list[Any]]:
        return [[to_json_value(value) for value in row] for row in self.rows]

    def summary(self) -> dict[str, Any]:
        """The JSON shape of `agent sql --json`."""
        return {
            "columns": self.columns,
            "rows": self.json_rows(),
            "row_count": self.row_count,
            "has_more": self.has_more,
            "error": self.error,
            "hint": self.hint,
            "elapsed_ms": self.elapsed_ms,
        }


def format_cell(value: Any, max_chars: int) -> str:
    text = _plain(value)
    if len(text) > max_chars:
        text = f"{text[:max_chars]}…[+{len(text) - max_chars} chars]"
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "\\n").replace("\r", "\\r")


def format_for_model(result: QueryResult, max_cell_chars: int, max_result_chars: int) -> str:
    """A compact Markdown rendering: status line, table, and a refine note when rows were cut."""
    if not result.ok:
        lines = ["Query failed:", result.error or ""]
        if result.hint:
            lines += ["", f"Hint: {result.hint}"]
        lines += ["", "Fix the query and try again."]
        return "\n".join(lines)
    more = " (more available)" if result.has_more else ""
    status = f"Result: {result.row_count} row{'s' if result.row_count != 1 else ''}{more}"
    if not result.columns:
        return status
    header = "| " + " | ".join(format_cell(c, max_cell_chars) for c in result.columns) + " |"
    lines = [status, "", header, "|" + "---|" * len(result.columns)]
    used = sum(len(line) + 1 for line in lines) + len(TRUNCATION_NOTE) + 160  # room for both notes
    shown = 0
    for row in result.rows:
        line = "| " + " | ".join(format_cell(v, max_cell_chars) for v in row) + " |"
        if used + len(line) + 1 > max_result_chars:
            break
        lines.append(line)
        used += len(line) + 1
        shown += 1
    if shown < result.row_count:
        lines += [
            "",
            f"[Output cut to {shown} of {result.row_count} rows to fit {max_result_chars} "
            "characters - select fewer columns or aggregate]",
        ]
    if result.has_more:
        lines += ["", TRUNCATION_NOTE]
    return "\n".join(lines)


def to_json_value(value: Any) -> Any:
    """JSON-safe value: exact numbers stay numbers, everything else becomes faithful text."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**53 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else _plain(value)
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k): to_json_value(v) for k, v in value.items()}
    return _plain(value)


def _plain(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    if isinstance(value, list):
        return "[" + ", ".join(_nested(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_nested(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_nested(k)}: {_nested(v)}" for k, v in value.items()) + "}"
    if isinstance(value, uuid.UUID | IPv4Address | IPv6Address):
        return str(value)
    return str(value)


def _nested(value: Any) -> str:
    return f"'{value}'" if isinstance(value, str) else _plain(value)
