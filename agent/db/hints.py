"""Short hints for the model, keyed by ClickHouse error code, with nearest real names for typos.

Every name a hint or a cleaned engine message shows comes from the agent's scope: the engine's own
"Maybe you meant" suggestions are filtered, so an error never names a table the model may not read.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable

_CODE = re.compile(r"Code:\s*(\d+)")
_UNKNOWN_NAME = re.compile(
    r"(?:Unknown (?:expression or function )?identifier|Missing columns:|Unknown table expression identifier|"
    r"Table \S+ does not exist|Unknown expression identifier)\s*[`'\"]?([\w.]+)",
    re.IGNORECASE,
)
_UNKNOWN_TABLE = re.compile(r"Table ([\w.`]+) does not exist|Unknown table expression identifier '([\w.]+)'")

_EXCEPTION_TEXT = re.compile(r"Code:\s*\d+\.\s*DB::(?:Errno)?Exception:.*", re.DOTALL)
_VERSION_SUFFIX = re.compile(r"\s*\(version [\d.]+(?: \(official build\))?\)\.?\s*")
_SUGGESTION_LIST = re.compile(r"\s*Maybe you meant:?\s*\[([^\]]*)\]\.?")
_SUGGESTION_ONE = re.compile(r"\s*Maybe you meant:?\s*([\w.`']+)\??\.?")
MAX_ERROR_CHARS = 2_000  # an error's text is partly the query's to choose (throwIf)
# The agent's own wrapping statements, which the model never wrote.
_WRAPPER_SCOPE = re.compile(
    r"\s*:?\s*In scope (?:SELECT \* APPLY\(x -> if\(isNull\(x\).*?LIMIT \d+|DESCRIBE TABLE \(.*?\)"
    r"|WITH formatQuery\(unhex\('.*?(?=\s*\([A-Z_]+\)\s*$|$))\.?",
    re.DOTALL,
)


def clean_error(message: str, may_name: Callable[[str], bool]) -> str:
    """ClickHouse's exception text without wrappers, version suffixes, stack traces, the agent's own
    wrapping SQL, or suggestions of names outside the scope."""
    match = _EXCEPTION_TEXT.search(message)
    text = match.group(0) if match else message
    text = text.split("\nStack trace", 1)[0]
    text = _VERSION_SUFFIX.sub(" ", text)
    # chdb repeats "Code: N. DB::Exception:" when it re-wraps an error.
    text = re.sub(r"^(Code:\s*\d+\.\s*DB::(?:Errno)?Exception:\s*)+", lambda m: m.group(1), text)
    text = re.sub(r"(Code:\s*\d+\.\s*DB::(?:Errno)?Exception:\s*)\1+", r"\1", text)
    text = _WRAPPER_SCOPE.sub("", text)

    def keep_listed(found: re.Match[str]) -> str:
        names = [name.strip().strip("'`") for name in found.group(1).split(",")]
        kept = [f"'{name}'" for name in names if name and may_name(name)]
        return f" Maybe you meant: [{', '.join(kept)}]." if kept else ""

    text = _SUGGESTION_LIST.sub(keep_listed, text)
    text = _SUGGESTION_ONE.sub(lambda m: m.group(0) if may_name(m.group(1).strip("'`")) else "", text)
    text = text.strip()
    return text if len(text) <= MAX_ERROR_CHARS else f"{text[:MAX_ERROR_CHARS]}… [error cut]"


HINTS: dict[int, str] = {
    62: "Syntax error: check keywords, commas, brackets and quoting (identifiers in backticks, strings in '').",
    47: "Unknown column: check the schema for the exact name; with JOINs qualify it with a table alias.",
    60: "Unknown table: use the database-qualified names from the schema (database.table).",
    81: "Unknown database: use the database names from the schema.",
    46: "Unknown function: ClickHouse names differ from other SQL dialects (toDate, toStartOfMonth, "
    "dateDiff, countIf, uniqExact, quantile(0.5)(x)).",
    53: "Type mismatch: cast explicitly (toInt64, toFloat64, toString, toDate) or compare like with like.",
    386: "No common type: make both sides the same type with an explicit cast; wrap NULL-able values in "
    "coalesce/ifNull.",
    43: "Illegal argument type: check the function's argument types; cast with toFloat64/toString/toDate.",
    215: "Not an aggregate: every selected column must be in GROUP BY or inside an aggregate function "
    "(any(), max(), count()).",
    184: "Aggregate inside an aggregate: compute the inner aggregate in a subquery first.",
    159: "Timeout: the query ran too long. Filter earlier (WHERE on the sorting key), aggregate, or "
    "select fewer columns.",
    241: "Memory limit: aggregate before joining, filter earlier, or reduce GROUP BY cardinality.",
    158: "Too many rows read: add WHERE filters (ideally on the sorting key) or sample with a LIMIT in a subquery.",
    307: "Too many bytes read: select fewer columns and filter earlier.",
    164: "Read-only: only SELECT-style queries run here; settings cannot be changed.",
    396: "Result too large: aggregate, or add ORDER BY ... LIMIT to return fewer rows.",
    179: "Duplicate alias: give every selected expression a distinct alias.",
    352: "Ambiguous column: qualify the column with its table alias.",
    36: "Bad arguments: check the function's documented arguments.",
    42: "Wrong number of arguments for a function.",
    48: "Not implemented in ClickHouse: rewrite the query with supported syntax.",
    394: "The query was cancelled.",
}


def error_code(message: str) -> int | None:
    match = _CODE.search(message)
    return int(match.group(1)) if match else None


def hint_for(message: str, tables: Iterable[str] = (), columns: Iterable[str] = ()) -> str | None:
    """A hint for a ClickHouse error message, suggesting real names for unknown ones."""
    code = error_code(message)
    hint = HINTS.get(code) if code is not None else None
    suggestion = _suggest_names(message, code, list(tables) if code in (60, 81) else list(columns))
    if suggestion:
        hint = f"{hint} {suggestion}" if hint else suggestion
    return hint


def _suggest_names(message: str, code: int | None, known_names: list[str]) -> str | None:
    # Unknown functions are left alone: ClickHouse's own message already says "Maybe you meant".
    if not known_names or code not in (47, 60, 81):
        return None
    match = _UNKNOWN_TABLE.search(message) if code == 60 else _UNKNOWN_NAME.search(message)
    if not match:
        return None
    wanted = next(group for group in match.groups() if group).strip("`")
    candidates = _nearest(wanted, known_names)
    return f"Did you mean: {', '.join(candidates)}?" if candidates else None


def _nearest(wanted: str, known_names: list[str]) -> list[str]:
    lowered = {name.lower(): name for name in known_names}
    short = wanted.rsplit(".", 1)[-1].lower()
    by_short: dict[str, str] = {}
    for name in known_names:
        by_short.setdefault(name.rsplit(".", 1)[-1].lower(), name)
    found = difflib.get_close_matches(wanted.lower(), list(lowered), n=3, cutoff=0.6)
    found += [by_short[s] for s in difflib.get_close_matches(short, list(by_short), n=3, cutoff=0.6)]
    names = [lowered.get(name, name) for name in found]
    return list(dict.fromkeys(names))[:3]
