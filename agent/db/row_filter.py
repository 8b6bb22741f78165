"""Whether a policy's row filter is safe to hand the engine: ClickHouse's own parser reads it, and it
must be one boolean expression over its table's columns, nothing else.

The engine applies a filter to every read of its table, under every question of a policy's people, so
it is checked like the model's SQL and then some: the filter is parsed inside `SELECT <filter> FROM
<table>` (the statement check's path: canonical text, JSON AST, allowlisted functions, tables in scope),
the AST must be exactly that one SELECT of one expression over that one table (so text that closes the
expression and adds a UNION, a GROUP BY or another table is refused), the expression may hold no
subquery, table, window or arrayJoin, and `DESCRIBE` must type it as a boolean (UInt8 or Bool, maybe
Nullable). An unknown column is the engine's own error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from agent.db import rendering
from agent.db.backend import EngineError
from agent.db.database import Database, new_query_id
from agent.db.statement import QueryRefused, decode_parse, parse_request

BOOLEAN_TYPES = frozenset({"UInt8", "Bool"})
_WRAPPERS = ("LowCardinality(", "Nullable(")  # a comparison of such columns is typed so
_NO_READS = frozenset({"Subquery", "SelectWithUnionQuery", "SelectQuery", "TableExpression", "TableIdentifier"})
_CODE = re.compile(r"^Code: \d+\. DB::Exception: ")
_ROW_CHANGING = frozenset({"arrayjoin"})  # a filter keeps or drops rows; it never makes more of them


class FilterRefused(Exception):
    """A row filter that is not one boolean expression over its table's columns."""


async def row_filter_problem(db: Database, table: str, condition: str) -> str | None:
    """Why `condition` cannot filter `table` (`db.table`), or None when it can."""
    sql = f"SELECT {condition}\nFROM {_quoted_table(table)}"  # the line break ends a trailing -- comment
    try:
        ast = await _parsed(db, sql)
        _one_expression_over(ast)
        checked = await db.check(sql)
        if checked.tables != {table}:
            raise FilterRefused("a row filter may not read another table")
        kind = await _type(db, checked.sql)
    except (FilterRefused, QueryRefused) as exc:
        return str(exc)
    except EngineError as exc:
        return _first_line(str(exc))
    if _unwrapped(kind) not in BOOLEAN_TYPES:
        return f"a row filter must be true or false for each row; this one is {kind}"
    return None


async def _parsed(db: Database, sql: str) -> dict[str, Any]:
    raw = await db.backend.query(parse_request(sql), "JSONCompactEachRow", new_query_id())
    try:
        _, ast = decode_parse(*json.loads(raw))
        parsed = json.loads(ast)
    except (ValueError, TypeError):
        raise FilterRefused("the row filter could not be checked") from None
    if not isinstance(parsed, dict):
        raise FilterRefused("the row filter could not be checked")
    return parsed


def _one_expression_over(ast: dict[str, Any]) -> None:
    """The statement is `SELECT <one expression> FROM <table>` and the expression reads no other rows."""
    selects = ast.get("list_of_selects", {}).get("children", []) if ast.get("type") == "SelectWithUnionQuery" else []
    if len(selects) != 1 or selects[0].get("type") != "SelectQuery":
        raise FilterRefused("a row filter is one expression (no UNION, no second statement)")
    select = selects[0]
    if extra := sorted(set(select) - {"type", "select", "tables"}):
        raise FilterRefused(f"a row filter is one expression (it adds a {extra[0].replace('_', ' ')} clause)")
    expressions = select["select"].get("children", [])
    if len(expressions) != 1:
        raise FilterRefused("a row filter is one expression, not a list")
    for node in _walk(expressions[0]):
        kind = node.get("type")
        if kind in _NO_READS:
            raise FilterRefused("a row filter may not hold a subquery or read another table")
        name = str(node.get("name", "")).lower()
        if kind == "Function" and (node.get("is_window_function") or name in _ROW_CHANGING):
            raise FilterRefused(f"a row filter may not use {node.get('name')}")


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            if "type" in current:
                yield current
            stack += [value for value in current.values() if isinstance(value, dict | list)]
        elif isinstance(current, list):
            stack += current


async def _type(db: Database, canonical: str) -> str:
    raw = await db.backend.query(rendering.describe(canonical), "JSONCompactEachRow", new_query_id())
    rows = [json.loads(line) for line in raw.decode("utf-8", errors="replace").splitlines() if line.strip()]
    return str(rows[0][1]) if len(rows) == 1 else "not one value"


def _unwrapped(kind: str) -> str:
    while kind.startswith(_WRAPPERS) and kind.endswith(")"):
        kind = kind[kind.index("(") + 1 : -1]
    return kind


def _quoted_table(table: str) -> str:
    return ".".join("`" + part.replace("\\", "\\\\").replace("`", "\\`") + "`" for part in table.split(".", 1))


def _first_line(message: str) -> str:
    """The engine's reason, without its code, its list of what it expected or its stack trace."""
    text = message.split("\nStack trace", 1)[0].split(". Expected one of", 1)[0]
    text = _CODE.sub("", " ".join(text.split()))
    return text[:300]
