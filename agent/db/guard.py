"""The second line of defence: a token-level check of the SQL before it reaches the engine.

The engine is the first line (a read-only connection with limits). This check exists for what the
engine lets through (chdb writes `INTO OUTFILE` even under readonly=1; `KILL QUERY` is allowed
read-only) and to give the model a clear, immediate reason instead of an engine error.
It works on sqlglot's ClickHouse tokens rather than a full parse, so SQL that sqlglot cannot
parse is still checked, and string literals or comments never trigger a false refusal.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise

from sqlglot.dialects.clickhouse import ClickHouse
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

_TOKENIZER = ClickHouse().tokenizer_class()

READ_STATEMENTS = {"SELECT", "WITH", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "EXISTS"}

# Table functions (and the scalar `file`) that reach files, the network, processes or other
# databases. Matched as `name(` anywhere in the statement, case-insensitively.
FORBIDDEN_FUNCTIONS = frozenset(
    {
        "file",
        "filecluster",
        "url",
        "urlcluster",
        "s3",
        "s3cluster",
        "gcs",
        "oss",
        "cosn",
        "azureblobstorage",
        "azureblobstoragecluster",
        "hdfs",
        "hdfscluster",
        "remote",
        "remotesecure",
        "cluster",
        "clusterallreplicas",
        "mysql",
        "postgresql",
        "mongodb",
        "redis",
        "sqlite",
        "odbc",
        "jdbc",
        "executable",
        "executablepool",
        "input",
        "deltalake",
        "deltalakecluster",
        "hudi",
        "hudicluster",
        "iceberg",
        "iceberglocal",
        "icebergs3",
        "icebergazure",
        "icebergs3cluster",
        "icebergazurecluster",
        "icebergcluster",
        "paimon",
        "python",
        "ytsaurus",
        "arrowflight",
        "prometheusquery",
        "timeseriesdata",
        "loop",
        "dictionary",
        "mergetreeindex",
        "mergetreeprojection",
        "fuzzjson",
        "fuzzquery",
    }
)


class StatementKind(StrEnum):
    SELECT = "select"  # can be wrapped as a subquery to cap rows at the engine
    META = "meta"  # SHOW / DESCRIBE / EXPLAIN / EXISTS: streamed and stopped early


@dataclass(frozen=True)
class CheckedStatement:
    sql: str
    kind: StatementKind


class QueryRefused(Exception):
    """The statement is not something the agent may run; the message says why."""


def check_statement(sql: str) -> CheckedStatement:
    """Return the single read statement in `sql`, or raise QueryRefused saying why not."""
    try:
        tokens = _TOKENIZER.tokenize(sql)
    except TokenError as exc:
        raise QueryRefused(f"Could not read the SQL ({exc}). Check quotes and brackets.") from None
    statements = _split_statements(tokens)
    if not statements:
        raise QueryRefused("The SQL is empty.")
    if len(statements) > 1:
        raise QueryRefused("Send one statement at a time; multi-statement input is not allowed.")
    body = statements[0]
    first = body[0].text.upper() if body[0].token_type != TokenType.L_PAREN else "SELECT"
    if first not in READ_STATEMENTS:
        typo = difflib.get_close_matches(first, sorted(READ_STATEMENTS), n=1, cutoff=0.75)
        suggestion = f" Did you mean {typo[0]}?" if typo else ""
        raise QueryRefused(
            f"Only read queries are allowed (SELECT, WITH, SHOW, DESCRIBE, EXPLAIN), not {first}.{suggestion}"
        )
    _refuse_forbidden_clauses(body)
    _refuse_forbidden_functions(body)
    text = sql[body[0].start : body[-1].end + 1]
    kind = StatementKind.SELECT if first in {"SELECT", "WITH"} else StatementKind.META
    return CheckedStatement(sql=text, kind=kind)


def _split_statements(tokens: list[Token]) -> list[list[Token]]:
    statements: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            statements.append([])
        else:
            statements[-1].append(token)
    return [statement for statement in statements if statement]


def _refuse_forbidden_clauses(body: list[Token]) -> None:
    for index, token in enumerate(body):
        word = token.text.upper()
        following = body[index + 1] if index + 1 < len(body) else None
        if word == "INTO" and following is not None and following.text.upper() in ("OUTFILE", "TABLE"):
            raise QueryRefused("INTO OUTFILE / INTO TABLE is not allowed: results come back to the agent.")
        if token.token_type == TokenType.SETTINGS or word == "SETTINGS":
            raise QueryRefused("A SETTINGS clause is not allowed: limits are fixed on the connection.")
        if word == "FORMAT" and (following is None or following.token_type != TokenType.L_PAREN):
            raise QueryRefused("A FORMAT clause is not allowed: the agent chooses the result format.")


def _refuse_forbidden_functions(body: list[Token]) -> None:
    for token, following in pairwise(body):
        if following.token_type != TokenType.L_PAREN:
            continue
        if token.token_type in (TokenType.STRING, TokenType.NUMBER):
            continue
        if token.text.lower() in FORBIDDEN_FUNCTIONS:
            raise QueryRefused(
                f"The function {token.text}() reaches files, the network or other databases "
                "and is not allowed. Query the tables in the schema instead."
            )
