"""Every transformation of text that a query, a model, a Slack user or the data chooses takes time
linear in it: on adversarial text eight times the size, each takes about eight times longer, not
sixty-four (tests/timing.py measures the growth, so a busy machine cannot fail it). (On Python's
backtracking `re`, `SELECT throwIf(1, repeat(' ', 4000))` froze the app for 17.5 s in clean_error.) The
rewrites that could not keep their pattern are checked against the old patterns on short text, where
backtracking costs nothing."""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from agent import linear_re
from agent.db import Database, EngineError, engine_process, hints, rendering, server
from agent.db.backend import bounded_error
from agent.db.hints import clean_error, error_code, hint_for
from agent.pipeline.guards import dangling_citations
from agent.pipeline.tools import clean_sql, normalized
from agent.suggestions.examples import parse_questions
from agent.suggestions.followups import parse_followups
from bots.slack import blocks, receive
from evals import judge, scoring
from tests.timing import cpu_per_call_s, fastest_wall_s, growth, linear_limit

KB = 1024
# 64 KB: more than any reply or message (the engine cuts error text at 16 KB); measured against 8 KB.
SMALL, LARGE = 8 * KB, 64 * KB
TYPE_NAME_SIZE = 128 * KB  # a query chooses type names (an Enum's labels), up to about 100 KB
SLOWEST_CHECKED = 3  # of the texts, those slowest at the small size have their growth measured

FRAGMENTS = [
    " ",
    "\n",
    " \n",
    "\u3000",
    "Maybe you meant ",
    "Maybe you meant: [",
    "Maybe you meant: x ",
    "Code: 1. DB::Exception: ",
    "Code: 1. DB::Exception:" + " " * 40,
    "In scope SELECT * APPLY(x -> if(isNull(x)",
    " : In scope ",
    " In scope DESCRIBE TABLE (",
    " In scope WITH formatQuery(unhex('",
    " (version 1.2",
    "LIMIT ",
    "Unknown identifier ",
    "Table ",
    "\\",
    "\\|",
    "|",
    "| 1 ",
    "<@U",
    "<@UA|",
    "1",
    "1,234",
    "1,2345",
    "1. ",
    "1 ",
    "-1.5k ",
    "```",
    "```sql\n",
    "<sql>",
    "</sql>",
    "<invoke",
    "[",
    "[Q1",
    "{",
    '{"a":',
    "/*",
    "'\\",
    "ORDER ",
    "pass ",
    "verdict ",
    "- ",
    "Nullable(",
]


def repeated(fragment: str, size: int) -> str:
    return (fragment * (size // len(fragment) + 1))[:size]


def adversarial_texts(size: int) -> dict[str, str]:
    texts = {f"{fragment!r} repeated": repeated(fragment, size) for fragment in FRAGMENTS}
    texts["digits, then x"] = "1" * (size - 1) + "x"
    texts["spaces, then x"] = " " * (size - 1) + "x"
    texts["nested brackets"] = "[" * (size // 2) + "]" * (size // 2)
    texts["nested parentheses"] = "(" * (size // 2) + ")" * (size // 2)
    texts["a wide table"] = "|" + "a|" * (size // 4) + "\n|-|\n" + "|x|\n" * (size // 8)
    texts["a table with a long cell"] = "|" + "a" * (size // 2) + "|\n|-|\n" + "|x|\n" * (size // 8)
    return texts


TABLES = [f"db.table_{n}" for n in range(50)]
COLUMNS = [f"column_{n}" for n in range(200)]
NO_QUERIES: Any = SimpleNamespace(queries=[])


def ignore_verdict_errors(text: str) -> None:
    with contextlib.suppress(judge.VerdictError):
        judge.parse_verdict(text)


TRANSFORMATIONS: dict[str, Callable[[str], object]] = {
    # ClickHouse error text (a query chooses part of it)
    "clean_error": lambda t: clean_error(t, lambda name: True),
    "clean_error, no name in scope": lambda t: clean_error(t, lambda name: False),
    "error_code": error_code,
    "hint_for": lambda t: hint_for(t, TABLES, COLUMNS),
    "hint_for an unknown table": lambda t: hint_for(f"Code: 60. Table {t} does not exist", TABLES),
    "hint_for an unknown column": lambda t: hint_for(f"Code: 47. Unknown identifier {t}", [], COLUMNS),
    # each pattern of clean_error and hint_for on its own, past the cut to MAX_MESSAGE_CHARS
    "hints version suffix": lambda t: hints._VERSION_SUFFIX.sub(" ", t),
    "hints suggestion list": lambda t: hints._SUGGESTION_LIST.sub("", t),
    "hints one suggestion": lambda t: hints._SUGGESTION_ONE.sub("", t),
    "hints wrapper scope": lambda t: hints._WRAPPER_SCOPE.sub("", t),
    "hints leading prefixes": hints._last_of_leading_prefixes,
    "hints repeated prefixes": hints._one_of_repeated_prefixes,
    "hints unknown name": hints._UNKNOWN_NAME.search,
    "hints unknown table": hints._UNKNOWN_TABLE.search,
    "hints code": hints._CODE.search,
    # the server's grants (the server's own text, but patterns alike)
    "server grant": lambda t: server._GRANT.match(f"GRANT {t} ON db.* TO agent"),
    "server column lists": lambda t: server._COLUMN_LIST.sub("", t),
    # cells and type names (a query chooses them)
    "TSV cell": rendering._tsv_cell,
    # model output: SQL, replies, answers
    "clean_sql": clean_sql,
    "normalized": normalized,
    "parse_followups": lambda t: parse_followups(t, exclude="x"),
    "parse_questions": parse_questions,
    "dangling_citations": lambda t: dangling_citations(t, NO_QUERIES),
    "slack_markdown": lambda t: blocks.slack_markdown(t, final=True),
    "slack_markdown, still streaming": lambda t: blocks.slack_markdown(t, final=False),
    "Slack table cells": blocks._cells,
    # Slack message text
    "Slack question text": lambda t: receive.question_text(t, "U1"),
    "Slack mentions": receive._MENTION.findall,
    # eval answers, suite values, gold SQL, judge replies
    "scoring figures": scoring.figures,
    "scoring is_number": scoring.is_number,
    "scoring mentions a number": lambda t: scoring.mentions(t, "336776"),
    "scoring mentions a word": lambda t: scoring.mentions(t, "ATL"),
    "scoring mentions a long text": lambda t: scoring.mentions(t, t[: len(t) // 2] + "!"),
    "scoring declines": scoring.declines,
    "scoring orders_rows": scoring.orders_rows,
    "judge verdict": ignore_verdict_errors,
}


def slowest(transformation: Callable[[str], object], texts: dict[str, str]) -> list[str]:
    """The names of the texts `transformation` takes longest on (one try each, on the small texts: a
    ranking, where what grows faster than linear already stands out)."""
    return sorted(texts, key=lambda name: cpu_per_call_s(lambda: transformation(texts[name]), tries=1))[
        -SLOWEST_CHECKED:
    ]


def assert_linear(
    what: str, transformation: Callable[[str], object], small: dict[str, str], large: dict[str, str]
) -> None:
    factor = len(next(iter(large.values()))) / len(next(iter(small.values())))
    for name in slowest(transformation, small):
        grew = growth(transformation, small[name], large[name])
        assert grew < linear_limit(factor), f"{what} took {grew:.0f}x as long on {name}, {factor:.0f}x the size"


@pytest.mark.parametrize("name", list(TRANSFORMATIONS))
def test_adversarial_text_takes_time_linear_in_its_size(name: str) -> None:
    assert_linear(name, TRANSFORMATIONS[name], adversarial_texts(SMALL), adversarial_texts(LARGE))


def type_names(n: int) -> dict[str, str]:
    return {
        "wrappers": "Nullable(" * (n // 18) + "Int8" + ")" * (n // 18),
        "wrappers, unclosed": "LowCardinality(" * (n // 15),
        "an enum": "Enum8(" + ", ".join(f"'{i}' = {i % 100}" for i in range(n // 12)) + ")",
        "parentheses": "(" * (n // 2) + ")" * (n // 2),
    }


@pytest.mark.parametrize(
    "transformation", [rendering.base_type, rendering.is_numeric, lambda t: rendering.json_value("1", t)]
)
def test_long_type_names_take_time_linear_in_their_size(transformation: Callable[[str], object]) -> None:
    assert_linear("the type name", transformation, type_names(TYPE_NAME_SIZE // 8), type_names(TYPE_NAME_SIZE))


@pytest.mark.parametrize(
    "pattern", [r"(a*)*b", r"(a|a)*b", r"(\s*:?\s*)+x", r"(\w+\s?)*$", r"^(\d+,?)*\.$"], ids=lambda p: p
)
def test_patterns_that_backtrack_exponentially_in_python_are_linear_here(pattern: str) -> None:
    regex = linear_re.compile(pattern)

    def texts(size: int) -> dict[str, str]:
        return {"a": "a" * size, "space colon": " :" * (size // 2), "digits, comma": "1," * (size // 2) + "x"}

    assert_linear(pattern, regex.search, texts(SMALL), texts(LARGE))


def test_the_growth_measure_tells_a_quadratic_pattern_from_a_linear_one() -> None:
    """What the tests above rely on: a pattern that backtracks quadratically grows past the limit."""
    old, new = _OLD_TABLE_NUMBER.match, blocks._NUMBER.fullmatch
    small, large = "1" * 500 + "x", "1" * 4_000 + "x"
    assert growth(old, small, large) > linear_limit(8) > growth(new, small, large)


def test_python_class_spellings_keep_their_unicode_meaning() -> None:
    assert linear_re.compile(r"[\w.]+").findall("café.x ١٢_ -") == ["café.x", "١٢_"]
    assert linear_re.compile(r"\d+").findall("12 ١٢ ²") == ["12", "١٢"]
    assert linear_re.compile(r"\s+").sub("_", "a\u3000b\x85c\td") == "a_b_c_d"
    assert linear_re.compile(r"[^\w]").findall("a-b") == ["-"]
    assert linear_re.compile(r"\u2212\d").findall("−1") == ["−1"]
    assert linear_re.compile("x").sub("y", "x\ud800") == "y\ufffd"  # a lone surrogate has no UTF-8
    with pytest.raises(linear_re.error):
        linear_re.compile(r"\bword\b")  # RE2's \b is ASCII-only
    with pytest.raises(linear_re.error, match="missing"):
        linear_re.compile("(")


# --- the old patterns: what the rewrites keep, and what they cost ---

_OLD_VERSION_SUFFIX = re.compile(r"\s*\(version [\d.]+(?: \(official build\))?\)\.?\s*")
_OLD_SUGGESTION_LIST = re.compile(r"\s*Maybe you meant:?\s*\[([^\]]*)\]\.?")
_OLD_SUGGESTION_ONE = re.compile(r"\s*Maybe you meant:?\s*([\w.`']+)\??\.?")
_OLD_WRAPPER_SCOPE = re.compile(
    r"\s*:?\s*In scope (?:SELECT \* APPLY\(x -> if\(isNull\(x\).*?LIMIT \d+|DESCRIBE TABLE \(.*?\)"
    r"|WITH formatQuery\(unhex\('.*?(?=\s*\([A-Z_]+\)\s*$|$))\.?",
    re.DOTALL,
)
_OLD_TABLE_NUMBER = re.compile(r"^[-+]?[$€£]?[\d,]*\.?\d+%?$")
_OLD_VERDICT_LINE = re.compile(r"^\W*(?:verdict\W*)?(pass|fail)(?:ed)?\b\W*(.*)$", re.IGNORECASE | re.MULTILINE)
_OLD_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-\u2212]?)"
    r"(?P<digits>\d{1,3}(?:[,\u00a0\u2009\u202f]\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s?(?P<suffix>k|K|M|bn|thousand|million|billion)(?![\w]))?"
    r"(?![\w])"
)


def old_clean_error(message: str, may_name: Callable[[str], bool]) -> str:
    match = re.search(r"Code:\s*\d+\.\s*DB::(?:Errno)?Exception:.*", message, re.DOTALL)
    text = match.group(0) if match else message
    text = text.split("\nStack trace", 1)[0]
    text = _OLD_VERSION_SUFFIX.sub(" ", text)
    text = re.sub(r"^(Code:\s*\d+\.\s*DB::(?:Errno)?Exception:\s*)+", lambda m: m.group(1), text)
    text = re.sub(r"(Code:\s*\d+\.\s*DB::(?:Errno)?Exception:\s*)\1+", r"\1", text)
    text = _OLD_WRAPPER_SCOPE.sub("", text)

    def keep_listed(found: re.Match[str]) -> str:
        names = [name.strip().strip("'`") for name in found.group(1).split(",")]
        kept = [f"'{name}'" for name in names if name and may_name(name)]
        return f" Maybe you meant: [{', '.join(kept)}]." if kept else ""

    text = _OLD_SUGGESTION_LIST.sub(keep_listed, text)
    text = _OLD_SUGGESTION_ONE.sub(lambda m: m.group(0) if may_name(m.group(1).strip("'`")) else "", text)
    text = text.strip()
    return text if len(text) <= 2_000 else f"{text[:2_000]}… [error cut]"


ERROR_PIECES = [
    "Code: 1. DB::Exception: ",
    "Code: 1. DB::Exception:",
    "Code: 62. DB::Exception:  ",
    "Code:62.DB::ErrnoException:",
    " ",
    "\n",
    ": ",
    "In scope ",
    "SELECT * APPLY(x -> if(isNull(x)",
    " LIMIT ",
    "LIMIT 5",
    ".",
    "DESCRIBE TABLE (",
    ")",
    "WITH formatQuery(unhex('",
    " (UNKNOWN_IDENTIFIER)",
    "(A_b)",
    "Maybe you meant: ",
    "Maybe you meant ['a', 'b', `c`]",
    "[",
    "]",
    "?",
    "flights",
    " (version 24.1.1.1)",
    " (version 1.2 (official build))",
    "\nStack trace:\n0. f",
    "é",
    "\u3000",
]
NUMBER_PIECES = ["1", "23", "456", "1,234", ",", ".", "-", "\u2212", " ", "\u00a0", "k", "M", "bn", "million", "x", "_"]
CELL_PIECES = ["|", "\\", "\\|", " ", "a", "1"]


def random_texts(pieces: list[str], count: int = 3_000, most: int = 12) -> list[str]:
    chosen = random.Random(20_260_601)
    return ["".join(chosen.choice(pieces) for _ in range(chosen.randint(0, most))) for _ in range(count)]


def test_clean_error_keeps_what_the_old_patterns_did() -> None:
    def in_scope(name: str) -> bool:
        return name in {"a", "c", "flights"}

    for message in random_texts(ERROR_PIECES, most=14):
        assert clean_error(message, in_scope) == old_clean_error(message, in_scope), message


def test_figures_are_found_where_the_old_pattern_found_them() -> None:
    for text in random_texts(NUMBER_PIECES):
        old = [scoring._figure(bool(m["sign"]), m["digits"], m["suffix"] or "") for m in _OLD_NUMBER.finditer(text)]
        assert scoring.figures(text) == old, text


def test_table_cells_split_where_the_old_pattern_split_them() -> None:
    for text in random_texts(CELL_PIECES):
        inner = text.strip().removeprefix("|").removesuffix("|")
        old = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", inner)]
        assert blocks._cells(text) == old, text


def old_is_slower(old: Callable[[str], object], old_text: str, new: Callable[[str], object], new_text: str) -> None:
    before, after = cpu_per_call_s(lambda: old(old_text)), cpu_per_call_s(lambda: new(new_text))
    assert before > 5 * after, f"old {before:.4f} s on {len(old_text)} characters, new {after:.4f} s on {len(new_text)}"


def test_the_old_patterns_took_longer_on_far_less_text() -> None:
    # cubic in a run of spaces: the freeze of the finding
    old_is_slower(
        lambda t: _OLD_WRAPPER_SCOPE.sub("", t), " " * 600, lambda t: hints._WRAPPER_SCOPE.sub("", t), " " * 64 * KB
    )
    # quadratic in a run of digits (a table cell in an answer)
    old_is_slower(_OLD_TABLE_NUMBER.match, "1" * 3_000 + "x", blocks._NUMBER.fullmatch, "1" * 64 * KB + "x")
    # quadratic in a run of line breaks (a judge's reply)
    old_is_slower(_OLD_VERDICT_LINE.search, "\n" * 3_000, judge._VERDICT_LINE.search, "\n" * 64 * KB)


def test_the_server_backend_cuts_error_text_as_the_engine_process_does() -> None:
    assert server.bounded_error is engine_process.bounded_error is bounded_error
    assert bounded_error("x" * 16_384) == "x" * 16_384
    assert bounded_error("x" * 20_000) == "x" * 16_384 + "… [3616 characters cut]"


# --- through the real engine ---


# As fast as a plain error, whatever the text (the fastest of three tries of each, so a busy machine
# slows both alike): the freeze of the finding took 17.5 s, a thousand times a plain error.
AS_FAST = 20


async def test_an_error_text_of_spaces_comes_back_as_fast_as_a_plain_error(db: Database) -> None:
    await db.execute("SELECT 1")  # the engine is up
    plain = await fastest_wall_s(lambda: db.execute("SELECT throwIf(1, 'plain')"))
    for sql in (
        "SELECT throwIf(1, repeat(' ', 4000))",
        "SELECT throwIf(1, concat(' In scope', repeat(' ', 16000), 'x'))",
        "SELECT throwIf(1, repeat('Maybe you meant: [', 2000))",
        "SELECT CAST(repeat(' ', 10000) AS UInt8)",
    ):
        result = await db.execute(sql)
        assert result.error and len(result.error) < 2_100, sql
        took = await fastest_wall_s(lambda: db.execute(sql))  # noqa: B023 (awaited here)
        assert took < AS_FAST * plain, f"{took:.3f} s against {plain:.3f} s for a plain error: {sql}"


async def _download(db: Database, sql: str) -> None:
    with pytest.raises(EngineError):
        export = await db.export(sql, max_rows=10)
        async for _ in export.rows:
            pass


async def test_downloading_a_failing_query_comes_back_as_fast_as_a_plain_error(db: Database) -> None:
    plain = await fastest_wall_s(lambda: _download(db, "SELECT throwIf(1, 'plain')"))
    took = await fastest_wall_s(lambda: _download(db, "SELECT throwIf(1, repeat(' ', 16000))"))
    assert took < AS_FAST * plain, f"{took:.3f} s against {plain:.3f} s for a plain error"
