"""The numbers and dates a query's SQL states as literals: a filter or a limit an answer may repeat
(`flights over 1,000 miles`), which is no finding.

Only literals count: numbers outside comments, strings and quoted or bare identifiers (`/* 987654 */`,
`col_2013`, `"2013 total"` state nothing), dates inside string literals (`'2013-01-01'`). A small
scanner of ClickHouse's lexical rules (`--`, `#` and nested `/* */` comments; `'…'` strings with `''`
and backslash escapes; `"…"` and backtick identifiers) does: this is not a security check, and a SQL
it misreads only makes a figure a claim, or not, when it should not be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agent import linear_re

_NUMBER = linear_re.compile(r"\d+(?:\.\d+)?")
_DATE = linear_re.compile(r"(\d{4})-(\d{2})-(\d{2})")


@dataclass
class Literals:
    numbers: set[float] = field(default_factory=set)
    dates: set[tuple[int, int, int]] = field(default_factory=set)


def literals(sql: str) -> Literals:
    found = Literals()
    code: list[str] = []  # the SQL outside comments and quotes, each of those a space
    at = 0
    while at < len(sql):
        char, pair = sql[at], sql[at : at + 2]
        if pair == "--" or char == "#":
            end = sql.find("\n", at)
            at = len(sql) if end < 0 else end
        elif pair == "/*":
            at = _comment_end(sql, at)
        elif char in "'\"`":
            end = _quote_end(sql, at, char)
            if char == "'":
                found.dates.update((int(y), int(m), int(d)) for y, m, d in _DATE.findall(sql[at:end]))
            at = end
        else:
            code.append(char)
            at += 1
            continue
        code.append(" ")
    text = "".join(code)
    for match in _NUMBER.finditer(text):
        before = text[match.start() - 1] if match.start() else " "
        value = float(match.group())  # past a float's range: infinity, which states nothing
        if not (before.isalnum() or before in "_$.") and math.isfinite(value):
            found.numbers.add(value)
    return found


def _comment_end(sql: str, at: int) -> int:
    """After the `/* */` comment at `at`; ClickHouse's nest."""
    depth = 0
    while at < len(sql):
        if sql.startswith("/*", at):
            depth, at = depth + 1, at + 2
        elif sql.startswith("*/", at):
            depth, at = depth - 1, at + 2
            if depth == 0:
                return at
        else:
            at += 1
    return at


def _quote_end(sql: str, at: int, quote: str) -> int:
    """After the quoted literal or identifier at `at` (a doubled quote or a backslash escapes)."""
    at += 1
    while at < len(sql):
        if sql[at] == "\\":
            at += 2
        elif sql[at] == quote:
            if sql.startswith(quote, at + 1):
                at += 2
            else:
                return at + 1
        else:
            at += 1
    return len(sql)
