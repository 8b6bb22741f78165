"""A row filter is one boolean expression over its own table, as ClickHouse's parser reads it."""

from __future__ import annotations

import pytest

from agent.db import Database
from agent.db.row_filter import row_filter_problem

FLIGHTS = "nycflights13.flights"


@pytest.mark.parametrize(
    "condition",
    [
        "origin = 'JFK'",
        "origin IN ('JFK', 'EWR') AND month <= 6",
        "dep_delay > 0 -- a comment at the end",
        "isNull(tailnum) OR tailnum LIKE 'N%'",
    ],
)
async def test_a_boolean_expression_over_the_tables_columns_is_accepted(db: Database, condition: str) -> None:
    assert await row_filter_problem(db, FLIGHTS, condition) is None


@pytest.mark.parametrize(
    ("condition", "why"),
    [
        ("origin = ", "Syntax error"),
        ("no_such_column = 1", "no_such_column"),
        ("origin", "true or false"),  # a String, not a boolean
        ("origin IN (SELECT origin FROM nycflights13.weather)", "subquery"),
        ("origin IN nycflights13.weather", "another table"),
        ("1 UNION ALL SELECT 1", "UNION"),
        ("1 GROUP BY origin", "syntax error"),
        ("1 FROM nycflights13.weather UNION ALL SELECT 1", "UNION"),
        ("1, 2", "one expression"),
        ("arrayJoin([1, 0]) = 1", "arrayJoin"),
        ("count() OVER () > 0", "may not use"),
        ("1 SETTINGS readonly = 0", "syntax error"),
        ("origin = 'JFK'\nFROM nycflights13.weather WHERE 1", "Syntax error"),
        ("file('/etc/passwd') != ''", "file"),
    ],
)
async def test_anything_else_is_refused_with_why(db: Database, condition: str, why: str) -> None:
    problem = await row_filter_problem(db, FLIGHTS, condition)
    assert problem is not None and why.lower() in problem.lower(), problem
    assert "\n" not in problem
