"""Short hints for the model, keyed by ClickHouse error code, with nearest real names for typos.

Every name a hint or a cleaned engine message shows comes from the agent's scope: the engine's own
"Maybe you meant" suggestions are filtered, so an error never names a table the model may not read.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable

from agent import linear_re

# Error text is partly a query's to choose (throwIf, a value that failed to cast): every pattern here
# runs on RE2 (linear time) over at most MAX_MESSAGE_CHARS of it.
MAX_MESSAGE_CHARS = 8_192  # of a message (the engine's are up to 16 KB) that cleaning and hints read
MAX_ERROR_CHARS = 2_000  # of a cleaned message
MAX_NAME_CHARS = 128  # of an unknown name from a message, for the nearest-name search
_MAX_CODE_DIGITS = 9  # ClickHouse's have at most four; int() refuses thousands

_CODE = linear_re.compile(r"Code:\s*(\d+)")
_UNKNOWN_NAME = linear_re.compile(
    r"(?:Unknown (?:expression or function )?identifier|Missing columns:|Unknown table expression identifier|"
    r"Table \S+ does not exist|Unknown expression identifier)\s*[`'\"]?([\w.]+)",
    ignore_case=True,
)
_UNKNOWN_TABLE = linear_re.compile(r"Table ([\w.`]+) does not exist|Unknown table expression identifier '([\w.]+)'")

_EXCEPTION_PREFIX = linear_re.compile(r"Code:\s*\d+\.\s*DB::(?:Errno)?Exception:\s*")
_VERSION_SUFFIX = linear_re.compile(r"\s*\(version [\d.]+(?: \(official build\))?\)\.?\s*")
_SUGGESTION_LIST = linear_re.compile(r"\s*Maybe you meant:?\s*\[([^\]]*)\]\.?")
_SUGGESTION_ONE = linear_re.compile(r"\s*Maybe you meant:?\s*([\w.`']+)\??\.?")
# The agent's own wrapping statements, which the model never wrote. A formatQuery wrapper runs to the
# error name at the end, "(UNKNOWN_IDENTIFIER)", which is kept (`tail`).
_WRAPPER_SCOPE = linear_re.compile(
    r"\s*:?\s*In scope (?:SELECT \* APPLY\(x -> if\(isNull\(x\).*?LIMIT \d+\.?|DESCRIBE TABLE \(.*?\)\.?"
    r"|WITH formatQuery\(unhex\('.*?(?P<tail>\s*\([A-Z_]+\)\s*|\n?)\z)",
    dot_all=True,
)


def clean_error(message: str, may_name: Callable[[str], bool]) -> str:
    """ClickHouse's exception text without wrappers, version suffixes, stack traces, the agent's own
    wrapping SQL, or suggestions of names outside the scope."""
    message = message[:MAX_MESSAGE_CHARS]
    match = _EXCEPTION_PREFIX.search(message)
    text = message[match.start() :] if match else message
    text = text.split("\nStack trace", 1)[0]
    text = _VERSION_SUFFIX.sub(" ", text)
    text = _one_of_repeated_prefixes(_last_of_leading_prefixes(text))
    text = _WRAPPER_SCOPE.sub(lambda m: m.group("tail") or "", text)

    def keep_listed(found: linear_re.Match) -> str:
        names = [name.strip().strip("'`") for name in found.group(1).split(",")]
        kept = [f"'{name}'" for name in names if name and may_name(name)]
        return f" Maybe you meant: [{', '.join(kept)}]." if kept else ""

    text = _SUGGESTION_LIST.sub(keep_listed, text)
    text = _SUGGESTION_ONE.sub(lambda m: m.group(0) if may_name(m.group(1).strip("'`")) else "", text)
    text = text.strip()
    return text if len(text) <= MAX_ERROR_CHARS else f"{text[:MAX_ERROR_CHARS]}… [error cut]"


# chdb repeats "Code: N. DB::Exception: " when it re-wraps an error. (Without a backreference: RE2
# has none, and Python's took time cubic in a run of spaces after the prefix.)


def _last_of_leading_prefixes(text: str) -> str:
    """The text from the last of the prefixes it starts with, one right after another."""
    last_start, end = None, 0
    for prefix in _EXCEPTION_PREFIX.finditer(text):
        if prefix.start() != end:
            break
        last_start, end = prefix.start(), prefix.end()
    return text if last_start is None else text[last_start:]


def _one_of_repeated_prefixes(text: str) -> str:
    """One copy where a prefix (with the spaces after it) is repeated word for word; the last copy may
    be followed by more spaces, which stay."""
    prefixes = list(_EXCEPTION_PREFIX.finditer(text))
    pieces: list[str] = []
    kept_from = index = 0
    while index < len(prefixes):
        first = prefixes[index]
        copy, last = first.group(0), index
        while last + 1 < len(prefixes):
            following = prefixes[last + 1]
            if following.start() != prefixes[last].end() or not following.group(0).startswith(copy):
                break
            last += 1
            if following.group(0) != copy:
                break
        if last > index:
            pieces.append(text[kept_from : first.end()])
            kept_from = prefixes[last].start() + len(copy)
        index = last + 1
    pieces.append(text[kept_from:])
    return "".join(pieces)


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
    match = _CODE.search(message[:MAX_MESSAGE_CHARS])
    if match is None or len(match.group(1)) > _MAX_CODE_DIGITS:
        return None
    return int(match.group(1))


def hint_for(message: str, tables: Iterable[str] = (), columns: Iterable[str] = ()) -> str | None:
    """A hint for a ClickHouse error message, suggesting real names for unknown ones."""
    message = message[:MAX_MESSAGE_CHARS]
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
    wanted = next(group for group in match.groups() if group).strip("`")[:MAX_NAME_CHARS]
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
