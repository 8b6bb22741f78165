"""What one query returns (cells as ClickHouse printed them), and how the model is shown it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agent.db.rendering import Cell, json_value

TRUNCATION_NOTE = "[More rows available - add LIMIT, WHERE or GROUP BY to get exactly what you need]"


class QueryResult(BaseModel):
    query_id: str
    sql: str  # as the model wrote it
    ran_sql: str | None = None  # the canonical text ClickHouse printed and ran
    columns: list[str] = Field(default_factory=list)
    types: list[str] = Field(default_factory=list)
    rows: list[list[Cell]] = Field(default_factory=list)  # ClickHouse's text, long cells already cut
    totals: list[Cell] | None = None  # the WITH TOTALS row
    has_more: bool = False
    error: str | None = None
    error_code: int | None = None
    hint: str | None = None
    elapsed_ms: int = 0
    rows_read: int | None = None  # what the engine says the query read (None: it did not say)
    bytes_read: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def row_count(self) -> int:
        return len(self.rows)

    def json_rows(self, limit: int | None = None) -> list[list[Any]]:
        return [self.json_row(row) for row in self.rows[:limit]]

    def json_row(self, row: list[Cell]) -> list[Any]:
        return [json_value(cell, ch_type) for cell, ch_type in zip(row, self.types, strict=False)]

    def summary(self) -> dict[str, Any]:
        """The JSON shape of `agent sql --json`."""
        return {
            "columns": self.columns,
            "types": self.types,
            "rows": self.json_rows(),
            "totals": self.json_row(self.totals) if self.totals is not None else None,
            "row_count": self.row_count,
            "has_more": self.has_more,
            "error": self.error,
            "hint": self.hint,
            "elapsed_ms": self.elapsed_ms,
        }


def markdown_cell(text: Cell) -> str:
    if text is None:
        return "NULL"
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "\\n").replace("\r", "\\r")


def format_for_model(result: QueryResult, max_result_chars: int) -> str:
    """A compact Markdown rendering: status line, table, and a refine note when rows were cut; never
    longer than `max_result_chars` (very many or very long column names are cut too)."""
    text = _markdown(result, max_result_chars)
    if len(text) <= max_result_chars:
        return text
    return text[: max_result_chars - len(WIDTH_NOTE) - 1] + "\n" + WIDTH_NOTE


WIDTH_NOTE = "[Output cut: the columns do not fit - select fewer columns, with short aliases]"


def _markdown(result: QueryResult, max_result_chars: int) -> str:
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
    if not result.rows:
        columns = ", ".join(f"{name} ({ch_type})" for name, ch_type in zip(result.columns, result.types, strict=False))
        return f"{status}\nColumns: {columns}"
    header = "| " + " | ".join(markdown_cell(c) for c in result.columns) + " |"
    lines = [status, "", header, "|" + "---|" * len(result.columns)]
    used = sum(len(line) + 1 for line in lines) + len(TRUNCATION_NOTE) + 200  # room for the notes
    shown = 0
    for row in result.rows:
        line = "| " + " | ".join(markdown_cell(v) for v in row) + " |"
        if used + len(line) + 1 > max_result_chars:
            break
        lines.append(line)
        used += len(line) + 1
        shown += 1
    if result.totals is not None:
        lines += ["", "Totals: | " + " | ".join(markdown_cell(v) for v in result.totals) + " |"]
    if shown < result.row_count:
        lines += [
            "",
            f"[Output cut to {shown} of {result.row_count} rows to fit {max_result_chars} "
            "characters - select fewer columns or aggregate]",
        ]
    if result.has_more:
        lines += ["", TRUNCATION_NOTE]
    return "\n".join(lines)
