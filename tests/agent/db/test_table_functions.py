"""Inline rows run: values() whose arguments are literals and whose structure is plain names and types. Every
other table function, and values() holding anything else, is refused with the reason that applies."""

from __future__ import annotations

import pytest

from agent.db import Database
from agent.db.table_functions import TableFunctionRefused, check_structure

INLINE = [
    ("SELECT * FROM VALUES('c UInt32', 1, 2, 3)", [["1"], ["2"], ["3"]]),
    ("SELECT sum(c) FROM values('c UInt32', 1, 2, 3)", [["6"]]),
    ("SELECT * FROM values('a UInt8, b String', (1, 'x'), (2, 'y'))", [["1", "x"], ["2", "y"]]),
    ("SELECT * FROM values((1, 'x'), (-2, 'y'))", [["1", "x"], ["-2", "y"]]),
    ("SELECT * FROM values(1, 2.5, NULL)", [["1"], ["2.5"], [None]]),
    ("SELECT length(a) FROM values('a Array(UInt8)', [1, 2])", [["2"]]),
    ("SELECT * FROM values('d Nullable(Date), t DateTime(''UTC'')', ('2013-01-01', '2013-01-01 00:00:00'))", None),
    ("SELECT * FROM values('m Map(String, UInt8), t Tuple(a UInt8, b String)', (map('k', 1), (1, 'x')))", None),
    ("SELECT * FROM values('x Decimal(10, 2), s LowCardinality(String)', (1.5, 'a'))", None),
    ("SELECT * FROM (VALUES (1, 'a'), (2, 'b'))", [["1", "a"], ["2", "b"]]),
    # SQL's VALUES reads no structure: the string is a row
    ("SELECT * FROM (VALUES ('a UInt8, b String ALIAS hostName()'))", [["a UInt8, b String ALIAS hostName()"]]),
    (
        "SELECT f.carrier, v.label FROM nycflights13.airlines AS f "
        "JOIN values('carrier String, label String', ('AA', 'big')) AS v USING carrier",
        [["AA", "big"]],
    ),
]


@pytest.mark.parametrize(("sql", "rows"), INLINE)
async def test_inline_rows_run(db: Database, sql: str, rows: list[list[str | None]] | None) -> None:
    result = await db.execute(sql)
    assert result.ok, result.error
    if rows is not None:
        assert result.rows == rows


REFUSED = [
    # values() holding something other than literals, or a structure with expressions
    ("SELECT * FROM values('x String', (SELECT name FROM system.users))", "literal rows"),
    ("SELECT * FROM values('x String', (SELECT carrier FROM nycflights13.airlines))", "literal rows"),
    ("SELECT * FROM values('x String', hostName())", "literal rows"),
    ("SELECT * FROM values('x String', file('/etc/passwd'))", "literal rows"),
    ("SELECT * FROM values('x UInt8', 1 + 1)", "literal rows"),
    ("SELECT * FROM values(concat('x String ALIAS ', 'hostName()'), 'a')", "literal rows"),
    ("SELECT * FROM values(tuple(hostName()))", "literal rows"),
    ("SELECT * FROM (VALUES (1, hostName()))", "literal rows"),
    ("SELECT * FROM (VALUES ((SELECT name FROM system.users)))", "literal rows"),
    ("SELECT * FROM values('a UInt8, b String ALIAS hostName()', 1)", "structure of values()"),
    ("SELECT * FROM values('x String DEFAULT hostName()', 'a')", "structure of values()"),
    ("SELECT * FROM values('x String, y String MATERIALIZED currentUser()', 'a')", "structure of values()"),
    ("SELECT * FROM values('x String EPHEMERAL', 'a')", "structure of values()"),
    ("SELECT * FROM values('x String /* */ ALIAS hostName()', 'a')", "structure of values()"),
    ("SELECT * FROM values('x String -- \n, y String ALIAS hostName()', 'a')", "structure of values()"),
    ("SELECT * FROM values('x AggregateFunction(file, String)', 'a')", "structure of values()"),
    ("SELECT * FROM values('x Nullable(String ALIAS hostName())', 'a')", "structure of values()"),
    ("SELECT * FROM values('x Enum8(''a'' = 1)', 'a')", "structure of values()"),
    ("SELECT * FROM values('x String CODEC(ZSTD)', 'a')", "structure of values()"),
    # the other table functions, each with its reason
    ("SELECT * FROM file('/etc/passwd', 'LineAsString')", "reads files or object storage"),
    ("SELECT * FROM s3('http://127.0.0.1:1/b/x.csv', 'CSV', 'a String')", "reads files or object storage"),
    ("SELECT * FROM icebergS3('http://127.0.0.1:1/b/')", "reads files or object storage"),
    ("SELECT * FROM url('http://127.0.0.1:1/x', 'CSV', 'a String')", "reaches other servers"),
    ("SELECT * FROM remote('127.0.0.1:9000', system.one)", "reaches other servers"),
    ("SELECT * FROM postgresql('127.0.0.1:5432', 'db', 't', 'u', 'p')", "reaches other servers"),
    ("SELECT * FROM executable('cat /etc/passwd', 'TSV', 'a String')", "runs code on the server"),
    ("SELECT * FROM merge('system', '^users$')", "reads tables by name"),
    ("SELECT * FROM view(SELECT 1)", "reads tables by name"),
    ("SELECT * FROM mergeTreeIndex('nycflights13', 'flights')", "reads tables by name"),
    ("SELECT * FROM generateRandom('a UInt8, s String ALIAS hostName()') LIMIT 1", "parses and runs unseen"),
    ("SELECT * FROM format(CSV, 'a String ALIAS hostName()', '1')", "parses and runs unseen"),
    ("SELECT * FROM zeros(10)", "not among the table functions"),
]


@pytest.mark.parametrize(("sql", "why"), REFUSED)
async def test_refused_with_the_reason_that_applies(db: Database, sql: str, why: str) -> None:
    result = await db.execute(sql)
    assert not result.ok, f"ran: {sql}"
    assert why in (result.error or ""), result.error
    assert "files, the network or tables" not in (result.error or "")


@pytest.mark.parametrize(
    "structure",
    ["a UInt8", " a UInt8 , b String ", "t Tuple(a UInt8, b Array(Nullable(String)))", "d DateTime64(3, 'UTC')"],
)
def test_plain_structures_pass(structure: str) -> None:
    check_structure(structure)


@pytest.mark.parametrize(
    "structure",
    ["", "a", "a UInt8,", "a UInt8 b", "a UInt8)", "a UInt8(", "a\u00a0UInt8", "a Object('json')", "a JSON", "1 UInt8"],
)
def test_anything_else_is_refused(structure: str) -> None:
    with pytest.raises(TableFunctionRefused):
        check_structure(structure)
