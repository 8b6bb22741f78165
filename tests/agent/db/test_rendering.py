"""agent/db/rendering.py: the tool path marks a cut cell in Python exactly as the engine marks it
for a download, and reads nothing but the shape it asked for."""

from __future__ import annotations

import pytest

from agent.db import Database
from agent.db.rendering import parse_capped

# Cells at and around each cap: characters, bytes (4-byte characters, bytes that are not UTF-8, a
# character cut in the middle), empty and NULL.
CELLS = [
    "repeat('x', 200)",
    "repeat('x', 201)",
    "repeat('x', 500)",
    "repeat('é', 300)",
    "repeat('😀', 200)",
    "repeat('😀', 201)",
    "repeat(unhex('80'), 1000)",
    "concat(repeat('a', 799), '€')",
    "concat(repeat('é', 199), unhex('E282'))",
    "''",
    "NULL",
    # Bytes that are not UTF-8, which lengthUTF8 and leftUTF8 count in ways of their own.
    "repeat(unhex('80'), 300)",
    "repeat(unhex('F0'), 300)",
    "concat(repeat('a', 198), unhex('F0'), 'abc')",
    "concat(repeat(unhex('F0'), 100), repeat('a', 150))",
    "concat(repeat('a', 199), unhex('F0'), 'bcdefg')",
    "repeat(unhex('C0'), 250)",
    "repeat(unhex('FF'), 250)",
    "repeat(unhex('F8'), 300)",
    "repeat(unhex('F0'), 1000)",
]


@pytest.mark.parametrize("cell", CELLS)
async def test_the_tool_path_marks_a_cut_as_the_engine_does(db: Database, cell: str) -> None:
    sql = f"SELECT {cell} AS c, c AS again"
    shown = await db.execute(sql)
    export = await db.export(sql, max_rows=10, max_cell_chars=db.max_cell_chars)
    exported = [row async for row in export.rows]
    assert shown.error is None
    assert shown.rows == exported


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT number % 2 AS k, count() AS c FROM numbers(10) GROUP BY k WITH TOTALS",
        "SELECT number % 2 AS k, count() AS c FROM numbers(10) WHERE number > 100 GROUP BY k WITH TOTALS",
        "SELECT k, c FROM (SELECT number % 2 AS k, count() AS c FROM numbers(10) GROUP BY k WITH TOTALS) WHERE k > 5",
    ],
)
async def test_totals_are_never_taken_for_rows(db: Database, sql: str) -> None:
    """ClickHouse prints the totals after an empty line, also when no row comes before them."""
    shown = await db.execute(sql)
    printed = (await db.backend.query(sql, "TabSeparated", "agent-totals-reference")).decode().split("\n")
    rows, totals = printed[: printed.index("")], printed[printed.index("") + 1 : -1]
    assert shown.error is None
    assert shown.rows == [line.split("\t") for line in rows]
    assert [shown.totals] == [line.split("\t") for line in totals]


@pytest.mark.parametrize(
    "field",
    ["y41:1:1", "x41:1", "x41:1:1:1", "x41:-1:1", "x41:1:", "x4:1:1", "xZZ:1:1", "x41:١:1"],
)
def test_a_cell_of_another_shape_is_refused(field: str) -> None:
    with pytest.raises(ValueError):
        parse_capped(f"{field}\n".encode(), 200)


@pytest.mark.parametrize("raw", [b"x41:1:1\n\nx41:1:1\nx41:1:1\n", b"x41:1:1\n\n\nx41:1:1\n"])
def test_output_of_another_shape_is_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        parse_capped(raw, 200)
