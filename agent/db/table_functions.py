"""Which table functions a statement may read from, and why any other is refused.

Allowed: the ones that only generate numbers (the `table` lines of allowed_functions.txt), and `values()`
holding inline rows: every argument a literal, and its column structure, when given, plain names and types.
A structure is SQL the engine parses itself, unseen by the statement check, and its DEFAULT/ALIAS/MATERIALIZED
expressions run (`values('a UInt8, b String ALIAS hostName()', 1)`), so it must match the strict grammar below:
anything else, however harmless, is refused. Every other table function is refused with the reason that
applies to it.
"""

from __future__ import annotations

import re
from typing import Any

from agent.db.functions import FunctionPolicy

INLINE_ROWS = "values"
# What SQL's `(VALUES (1, 'a'), (2, 'b'))` becomes: rows only, a first string is a row, never a structure
SQL_VALUES = "sqlstandardvalues"
# Literals the parser keeps as functions: (1, [2]) is tuple(1, [2]).
_LITERAL_BUILDERS = frozenset({"tuple", "array", "map"})
# Type names a structure may use: data types only, none that instantiates a function or holds an expression.
_TYPES = (
    "UInt8 UInt16 UInt32 UInt64 UInt128 UInt256 Int8 Int16 Int32 Int64 Int128 Int256 Float32 Float64 BFloat16 "
    "Decimal Decimal32 Decimal64 Decimal128 Decimal256 String FixedString Date Date32 DateTime DateTime64 UUID "
    "IPv4 IPv6 Bool Boolean Nullable LowCardinality Array Tuple Map"
)
STRUCTURE_TYPES = frozenset(_TYPES.lower().split())
_TOKEN = re.compile(r"[ \t\r\n]*(?:([A-Za-z_][A-Za-z0-9_]*)|(\d+)|('[A-Za-z0-9_/+:. -]*')|([(),]))")
_GENERATED = (
    "numbers(), generate_series() and values() or (VALUES ...) with literal rows are allowed for generated or "
    "inline rows"
)

_REASONS: dict[tuple[str, ...], str] = {
    (
        "file", "filecluster", "filesystem", "hdfs", "hdfscluster", "s3", "s3cluster", "gcs", "cosn", "oss",
        "azureblobstorage", "azureblobstoragecluster", "deltalake", "hudi", "iceberg", "paimon", "sqlite",
        "arrowstream",
    ): "reads files or object storage",
    (
        "url", "urlcluster", "remote", "remotesecure", "cluster", "clusterallreplicas", "mysql", "postgresql",
        "mongodb", "redis", "odbc", "jdbc", "bigquery", "ytsaurus",
    ): "reaches other servers over the network",
    ("executable", "python", "eval"): "runs code on the server",
    (
        "merge", "loop", "dictionary", "view", "viewifpermitted", "viewexplain", "mergetree", "timeseries",
        "prometheusquery",  # and prometheusQueryRange: PromQL over a TimeSeries table named in its arguments
    ): "reads tables by name, past the check of the tables a statement reads",
    ("generaterandom", "format", "null", "input", "fuzzjson", "fuzzquery"): (
        "takes a column structure or SQL that the engine parses and runs unseen by this check"
    ),
}  # fmt: skip


class TableFunctionRefused(Exception):
    """Raised with the reason to give; the statement check turns it into its own refusal."""


def check_table_function(policy: FunctionPolicy, node: dict[str, Any]) -> None:
    """Allow the table function `node` (a Function node in table position), or raise TableFunctionRefused."""
    name = str(node.get("name", ""))
    if policy.allows_table_function(name):
        return
    if name.lower() in (INLINE_ROWS, SQL_VALUES) and "parameters" not in node:
        check_inline_rows(name, _arguments(node), structured=name.lower() == INLINE_ROWS)
        return
    raise TableFunctionRefused(f"The table function {name}() is not allowed: it {refusal_reason(name)}. {_GENERATED}.")


def refusal_reason(name: str) -> str:
    lowered = name.lower()
    for names, reason in _REASONS.items():
        if any(lowered == known or (lowered.startswith(known) and known in _FAMILIES) for known in names):
            return reason
    return "is not among the table functions this agent may use"


_FAMILIES = frozenset({"deltalake", "hudi", "iceberg", "paimon", "mergetree", "timeseries", "prometheusquery"})


def check_inline_rows(name: str, arguments: list[Any], *, structured: bool) -> None:
    """values(['structure',] row, ...): every argument written as a literal (or a tuple, array or map of
    literals), and a structure string of plain column names and types (`structured`: values() reads a first
    string as one)."""
    if not all(_is_literal(argument) for argument in arguments):
        raise TableFunctionRefused(
            f"{name}() is allowed only with literal rows, such as values('c UInt32', 1, 2, 3) or "
            "values((1, 'a'), (2, 'b')); put computed values in the SELECT list instead."
        )
    first = arguments[0].get("value") if arguments and structured else None
    if isinstance(first, dict) and first.get("field_type") == "String":
        check_structure(str(first.get("value", "")))


def check_structure(text: str) -> None:
    """A column structure of `name Type` pairs, types from STRUCTURE_TYPES with literal parameters."""
    tokens = _tokens(text)
    position = _column(tokens, 0)
    while position < len(tokens) and tokens[position] == ",":
        position = _column(tokens, position + 1)
    if position != len(tokens):
        raise _bad_structure()


def _column(tokens: list[str], position: int) -> int:
    if position >= len(tokens) or not _is_name(tokens[position]):
        raise _bad_structure()
    return _type(tokens, position + 1)


def _type(tokens: list[str], position: int) -> int:
    if position >= len(tokens) or tokens[position].lower() not in STRUCTURE_TYPES:
        raise _bad_structure()
    position += 1
    if position < len(tokens) and tokens[position] == "(":
        position = _parameter(tokens, position + 1)
        while position < len(tokens) and tokens[position] == ",":
            position = _parameter(tokens, position + 1)
        if position >= len(tokens) or tokens[position] != ")":
            raise _bad_structure()
        position += 1
    return position


def _parameter(tokens: list[str], position: int) -> int:
    """A type's parameter: a number, a quoted string, a type, or a named tuple element (`name Type`)."""
    if position >= len(tokens):
        raise _bad_structure()
    token = tokens[position]
    if token.isdigit() or token.startswith("'"):
        return position + 1
    if token.lower() in STRUCTURE_TYPES and (position + 1 >= len(tokens) or tokens[position + 1] in ",()"):
        return _type(tokens, position)
    return _column(tokens, position)


def _tokens(text: str) -> list[str]:
    tokens, position = [], 0
    end = len(text.rstrip(" \t\r\n"))
    while position < end:
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise _bad_structure()
        tokens.append(match.group(match.lastindex or 0))
        position = match.end()
    return tokens


def _is_name(token: str) -> bool:
    return token[:1].isalpha() or token[:1] == "_"


def _bad_structure() -> TableFunctionRefused:
    return TableFunctionRefused(
        "The structure of values() may hold only column names and plain types, such as 'c UInt32, s String' or "
        "'d Nullable(Date), a Array(UInt8)' (no DEFAULT, ALIAS, comments or other types); or leave it out: "
        "values((1, 'a'), (2, 'b'))."
    )


def _is_literal(node: Any) -> bool:
    if not isinstance(node, dict):
        return False
    if node.get("type") == "Literal":
        return True
    return (
        node.get("type") == "Function"
        and node.get("name") in _LITERAL_BUILDERS
        and all(_is_literal(argument) for argument in _arguments(node))
    )


def _arguments(node: dict[str, Any]) -> list[Any]:
    arguments = node.get("arguments", {})
    return list(arguments.get("children", [])) if isinstance(arguments, dict) else []
