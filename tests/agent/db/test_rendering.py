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
    "field",
    ["y41:1:1", "x41:1", "x41:1:1:1", "x41:-1:1", "x41:1:", "x4:1:1", "xZZ:1:1", "x41:١:1"],
)
def test_a_cell_of_another_shape_is_refused(field: str) -> None:
    with pytest.raises(ValueError):
        parse_capped(f"{field}\n".encode(), 200)
