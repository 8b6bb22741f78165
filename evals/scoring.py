"""Deterministic scoring: does an answer say what a case expects, and did the agent's queries return
the gold result?

Answers. An expected value that is a number (`336776`, `-5`, `1.64`) matches a number written in
the answer within half a unit of the last digit written, on either side: the answer's figure is
the expected value rounded to the precision the answer writes, or the expected value is the
answer's figure rounded to the precision the suite writes (whichever figure does the rounding
needs at least two significant digits; one-digit values match exactly). So `336,776`, `336776`,
`336.8k` and `337k` all match 336776 but `336,700` and `340k` do not; `1.6` and `1.6443` match
1.64 but `2` does not; `1,048.36` matches 1048 but `1.4` does not match 1. Any other expected
value matches case-insensitively as text, as a whole word where it starts or ends with a letter or
digit (`ATL` does not match "Atlanta").

Results. The gold result matches an agent's result when some of that result's columns, in any
order, hold the gold rows: NULLs equal NULLs, numbers match within `RESULT_REL_TOL` or to the
precision the gold value is printed with (a gold `1.64` from `round(x, 2)` matches an unrounded
1.6443), text exactly. Row order counts only when the gold query ends in ORDER BY; then the gold
rows must lead the agent's result in order (a top 3 answers a top-1 gold), otherwise the rows must
be the same multiset.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from agent import linear_re
from agent.db import QueryResult
from agent.reports.markdown import section_texts
from agent.runner import Outcome, RunResult
from evals.results import Check
from evals.suite import Case, Expect, Mention, ReportExpect

RESULT_REL_TOL = 1e-6
MAX_COLUMN_MAPPINGS = 5_000

# Answers, suite values and cells are text a model or the data chooses: the patterns run on RE2
# (linear time), which has no lookaround, so each takes the character on either side of what it looks
# for (`^` and `$` at the ends of the text) instead of looking at it.
_SEPARATORS = ",\u00a0\u2009\u202f"
_DROP_SEPARATORS = str.maketrans("", "", _SEPARATORS)
# A figure: no word character or "." before it, no word character after it.
_NUMBER = linear_re.compile(
    r"(?:^|[^\w.])(?P<figure>(?P<sign>[-\u2212]?)"
    r"(?P<digits>\d{1,3}(?:[" + _SEPARATORS + r"]\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s?(?P<suffix>k|K|M|bn|thousand|million|billion))?)(?:\W|$)"
)
# By number: RE2's match objects look a name up slowly.
_FIGURE, _SIGN, _DIGITS, _SUFFIX = (_NUMBER.groupindex[name] for name in ("figure", "sign", "digits", "suffix"))
_PLAIN_NUMBER = linear_re.compile(r"\s*[-+\u2212]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?\s*")
_SCALE = {"k": 1e3, "K": 1e3, "thousand": 1e3, "M": 1e6, "million": 1e6, "bn": 1e9, "billion": 1e9}
_REFUSAL = linear_re.compile(
    r"(?:^|\W)(?:can ?not|can't|couldn't|unable to|not able to|won't|will not|"
    r"(?:do not|don't|does not|doesn't) have (?:any )?(?:access|permission)|no access|"
    r"not (?:allowed|permitted|possible)|(?:must|have to|need to) decline|i decline|refuse|read-only)(?:\W|$)",
    ignore_case=True,
)
# Saying something is not there: no, not, none, only, without, missing, lacks, doesn't, isn't ...
_ABSENCE = linear_re.compile(
    r"(?:^|\W)(?:no|not|none|never|nothing|neither|nor|without|only|missing|lacks?|lacking|unavailable|absent|"
    r"(?:is|are|was|were|do|does|did|has|have|had|ca|could|wo)n't|cannot)(?:\W|$)",
    ignore_case=True,
)
_COMMENT_OR_LITERAL = linear_re.compile(
    r"--[^\n]*|/\*.*?\*/|'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`", dot_all=True
)
_ORDER_BY = linear_re.compile(r"(?:^|\W)ORDER\s+BY(?:\W|$)", ignore_case=True)


# --- numbers in text ---


@dataclass(frozen=True)
class Figure:
    """A number as written: its value and half a unit of its last written digit."""

    value: float
    half_unit: float
    significant: int


def figures(text: str) -> list[Figure]:
    """Every number written in `text` (thousands separators, k/M suffixes, a leading minus)."""
    found = []
    data = linear_re.utf8(text)
    position = 0
    # The next figure's left neighbour may be the character right after this one.
    while match := _NUMBER.search(data, position):
        found.append(_figure(bool(match[_SIGN]), match[_DIGITS].decode(), (match[_SUFFIX] or b"").decode()))
        position = match.end(_FIGURE)
    return found


def _figure(negative: bool, written: str, suffix: str) -> Figure:
    digits = written.translate(_DROP_SEPARATORS)
    scale = _SCALE.get(suffix, 1.0)
    decimals = len(digits.partition(".")[2])
    return Figure(
        value=(-1.0 if negative else 1.0) * float(digits) * scale,
        half_unit=0.5 * 10.0**-decimals * scale,
        significant=len(digits.replace(".", "").lstrip("0")),
    )


def is_number(text: str) -> bool:
    return bool(_PLAIN_NUMBER.fullmatch(text))


def _number(text: str) -> float:
    return float(text.strip().replace("\u2212", "-"))


def figure_matches(expected: Figure, written: Figure) -> bool:
    """Whether a figure written in an answer says the expected number (see the module docstring)."""
    difference = abs(written.value - expected.value)
    if difference <= 1e-9 * max(abs(expected.value), 1.0):
        return True
    if written.significant >= 2 and difference <= written.half_unit * (1 + 1e-9):
        return True
    return expected.significant >= 2 and difference <= expected.half_unit * (1 + 1e-9)


def mentions(text: str, expected: str) -> bool:
    """Whether `text` says `expected`: numerically for a number, else as case-insensitive text."""
    if is_number(expected):
        plain = "e" not in expected.lower()
        wanted = figures(expected.strip().lstrip("+"))[0] if plain else Figure(_number(expected), 0.0, 0)
        return any(figure_matches(wanted, figure) for figure in figures(text))
    needle = " ".join(expected.split())
    haystack = " ".join(text.replace("\u2019", "'").split())
    return _contains_text(haystack, needle, whole_start=needle[:1].isalnum(), whole_end=needle[-1:].isalnum())


def _contains_text(haystack: str, needle: str, *, whole_start: bool, whole_end: bool) -> bool:
    """Whether `needle` is in `haystack` ignoring case, with no word character before it (`whole_start`)
    or after it (`whole_end`). No pattern: a long needle would take RE2 time quadratic in the text."""
    if not needle:
        return True
    for start in _occurrences(_folded(needle), _folded(haystack)):
        end = start + len(needle)
        if whole_start and start > 0 and _is_word(haystack[start - 1]):
            continue
        if whole_end and end < len(haystack) and _is_word(haystack[end]):
            continue
        return True
    return False


def _folded(text: str) -> str:
    """`text` in lower case, character for character (one whose lower case is longer stays as it is)."""
    if text.isascii():
        return text.lower()
    return "".join(lower if len(lower := char.lower()) == 1 else char for char in text)


def _occurrences(needle: str, haystack: str) -> Iterator[int]:
    """Where `needle` starts in `haystack` (Knuth-Morris-Pratt: linear in both)."""
    fallback = [0] * len(needle)
    matched = 0
    for index in range(1, len(needle)):
        while matched and needle[index] != needle[matched]:
            matched = fallback[matched - 1]
        if needle[index] == needle[matched]:
            matched += 1
        fallback[index] = matched
    matched = 0
    for index, char in enumerate(haystack):
        while matched and char != needle[matched]:
            matched = fallback[matched - 1]
        if char == needle[matched]:
            matched += 1
        if matched == len(needle):
            yield index - len(needle) + 1
            matched = fallback[matched - 1]


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def declines(answer: str) -> bool:
    """Whether an answer reads as declining (can't, cannot, unable to, won't, no access, read-only...)."""
    return _REFUSAL.search(answer.replace("\u2019", "'")) is not None


def says_absent(answer: str) -> bool:
    """Whether an answer says something is not there (no, not, none, only, without, missing, doesn't...)."""
    return _ABSENCE.search(answer.replace("\u2019", "'")) is not None


def names(text: str, mention: Mention) -> bool:
    """Whether `text` mentions the value, or any of the ways to write it a list gives."""
    return any(mentions(text, way) for way in ([mention] if isinstance(mention, str) else mention))


def unnamed(text: str, wanted: Sequence[Mention]) -> list[Mention]:
    return [mention for mention in wanted if not names(text, mention)]


# --- results ---


@dataclass(frozen=True)
class Value:
    """One cell, normalised: NULL, a number (with half a unit of its printed precision), or text."""

    text: str | None
    number: float | None = None
    half_unit: float = 0.0

    @classmethod
    def of(cls, cell: str | None) -> Value:
        if cell is None or not is_number(cell):
            return cls(cell)
        number = _number(cell)
        if not math.isfinite(number):
            return cls(cell)
        try:
            exponent = Decimal(cell.strip().replace("\u2212", "-")).as_tuple().exponent
        except InvalidOperation:
            exponent = 0
        decimals = -exponent if isinstance(exponent, int) and exponent < 0 else 0
        return cls(cell, number, 0.5 * 10.0**-decimals if decimals else 0.0)

    def sort_key(self) -> tuple[int, float, str]:
        if self.text is None:
            return (0, 0.0, "")
        if self.number is not None:
            return (1, self.number, "")
        return (2, 0.0, self.text)


def gold_value_matches(gold: Value, actual: Value) -> bool:
    if gold.text is None or actual.text is None:
        return gold.text is None and actual.text is None
    if gold.number is not None and actual.number is not None:
        difference = abs(actual.number - gold.number)
        return difference <= max(RESULT_REL_TOL * abs(gold.number), gold.half_unit * (1 + 1e-9))
    return gold.text.strip() == actual.text.strip()


def _table(result: QueryResult) -> list[list[Value]]:
    return [[Value.of(cell) for cell in row] for row in result.rows]


def gold_found(gold: QueryResult, results: Sequence[QueryResult], *, ordered: bool) -> bool:
    """Whether the gold result appears among the agent's results (see the module docstring)."""
    gold_rows = _table(gold)
    return any(
        result.ok and _contains_gold(gold_rows, len(gold.columns), _table(result), len(result.columns), ordered)
        for result in results
    )


def _contains_gold(
    gold: list[list[Value]], width: int, actual: list[list[Value]], actual_width: int, ordered: bool
) -> bool:
    if width == 0 or actual_width < width:
        return False
    if not gold:
        return not actual
    if ordered:
        if len(actual) < len(gold):
            return False
        actual = actual[: len(gold)]
    elif len(actual) != len(gold):
        return False
    candidates = []
    for g in range(width):
        column = [row[g] for row in gold]
        fits = [a for a in range(actual_width) if _column_fits(column, [row[a] for row in actual], ordered)]
        if not fits:
            return False
        candidates.append(fits)
    mappings = (m for m in itertools.product(*candidates) if len(set(m)) == width)
    for mapping in itertools.islice(mappings, MAX_COLUMN_MAPPINGS):
        projected = [[row[a] for a in mapping] for row in actual]
        if _rows_match(gold, projected, ordered):
            return True
    return False


def _column_fits(gold: list[Value], actual: list[Value], ordered: bool) -> bool:
    """A quick necessary condition: the column holds the gold values (in order, or as sorted multisets)."""
    if not ordered:
        gold, actual = sorted(gold, key=Value.sort_key), sorted(actual, key=Value.sort_key)
    return all(gold_value_matches(g, a) for g, a in zip(gold, actual, strict=True))


def _rows_match(gold: list[list[Value]], actual: list[list[Value]], ordered: bool) -> bool:
    def same(g: list[Value], a: list[Value]) -> bool:
        return all(gold_value_matches(x, y) for x, y in zip(g, a, strict=True))

    if ordered:
        return all(same(g, a) for g, a in zip(gold, actual, strict=True))
    # A perfect matching of gold rows to actual rows (Kuhn's augmenting paths; results are small).
    edges = [[j for j, a in enumerate(actual) if same(g, a)] for g in gold]
    owner: dict[int, int] = {}

    def assign(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j not in seen:
                seen.add(j)
                if j not in owner or assign(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    return all(assign(i, set()) for i in range(len(gold)))


def orders_rows(sql: str) -> bool:
    """Whether a query's outermost SELECT has an ORDER BY (comments and string literals ignored)."""
    text = _COMMENT_OR_LITERAL.sub(" ", sql)
    depth = 0
    outer = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0:
            outer.append(char)
    return _ORDER_BY.search("".join(outer)) is not None


# --- a whole case ---


@dataclass(frozen=True)
class Gold:
    """The gold query's result for a case, or why there is none."""

    sql: str
    result: QueryResult | None = None
    error: str | None = None

    @property
    def problem(self) -> str | None:
        if self.error:
            return self.error
        if self.result is None:
            return "the gold query did not run"
        if not self.result.ok:
            return f"the gold query failed: {self.result.error}"
        if self.result.has_more:
            return f"the gold result has more than {self.result.row_count} rows (MAX_ROWS), so it cannot be matched"
        return None


def score(case: Case, result: RunResult, gold: Gold | None) -> list[Check]:
    """Every deterministic check the case asks for, in a fixed order; `run` always comes first."""
    broken = result.outcome in (Outcome.ERROR, Outcome.CANCELLED)
    checks = [_check("run", not broken, f"the run ended {result.outcome.value}: {result.error or 'no answer'}")]
    checks += _answer_checks(case.expect, result)
    if gold is not None:
        checks.append(_gold_check(gold, result))
    return checks


def _answer_checks(expect: Expect, result: RunResult) -> Iterator[Check]:
    answer = result.answer
    if expect.contains:
        missing = unnamed(answer, expect.contains)
        yield _check("contains", not missing, f"the answer does not mention {quoted(missing)}")
    if expect.not_contains:
        present = [value for value in expect.not_contains if mentions(answer, value)]
        yield _check("not_contains", not present, f"the answer mentions {quoted(present)}")
    if expect.classification is not None:
        got, wanted = result.classification, expect.classification
        yield _check("classification", got == wanted, f"classified {got.value}, expected {wanted.value}")
    if expect.max_queries is not None:
        ran, limit = result.metrics.sql_queries, expect.max_queries
        yield _check("max_queries", ran <= limit, f"ran {ran} queries, at most {limit} expected")
    if expect.refused is not None:
        wrong = "the answer does not decline" if expect.refused else "the answer declines"
        yield _check("refused", declines(answer) == expect.refused, wrong)
    if expect.missing:
        yield _missing_check(expect.missing, answer)
    if expect.refuses:
        unsaid = unnamed(answer, expect.refuses)
        why = f"the answer does not name what it declines: {quoted(unsaid)}" if unsaid else "it does not decline"
        yield _check("refuses", declines(answer) and not unsaid, why)
    if expect.report is not None:
        yield _report_check(expect.report, result)
    if expect.figures_verified:
        if result.figures is not None and result.figures.unchecked:  # the check ran out of time: not verified
            yield _check("figures_verified", False, f"figures not checked ({result.figures.unchecked})")
            return
        failures = result.figures.failures() if result.figures else []
        named = "; ".join(f"{f.text}: {f.reason}" for f in failures[:3])
        yield _check("figures_verified", not failures, f"{len(failures)} figure(s) unverified ({named})")


def _report_check(expect: ReportExpect, result: RunResult) -> Check:
    """The case's report ends as expected, with text in the sections named and at least its findings."""
    report = result.report
    if report is None:
        return _check("report", False, "the run wrote no report")
    problems = []
    if expect.outcome is not None and report.outcome is not expect.outcome:
        problems.append(f"it is {report.outcome.value}, expected {expect.outcome.value}")
    texts = {**section_texts(report), **({"findings": "yes"} if report.findings else {})}
    if empty := [name for name in expect.sections if name not in texts]:
        problems.append(f"no {', '.join(empty)} section")
    if expect.min_findings is not None and len(report.findings) < expect.min_findings:
        problems.append(f"{len(report.findings)} finding(s), at least {expect.min_findings} expected")
    return _check("report", not problems, "the report: " + "; ".join(problems))


def _missing_check(missing: list[Mention], answer: str) -> Check:
    """The answer names what the data lacks and says it is not there: declining alone names nothing."""
    if unsaid := unnamed(answer, missing):
        return _check("missing", False, f"the answer does not name what is missing: {quoted(unsaid)}")
    return _check("missing", says_absent(answer), f"the answer names {quoted(missing)} but never says it is absent")


def _gold_check(gold: Gold, result: RunResult) -> Check:
    if gold.problem:
        return Check(name="gold_sql", passed=False, reason=gold.problem)
    assert gold.result is not None
    found = gold_found(gold.result, [q.result for q in result.queries], ordered=orders_rows(gold.sql))
    ran = sum(1 for q in result.queries if q.result.ok)
    reason = f"none of the {ran} successful queries returned the gold result" if ran else "no query returned a result"
    return _check("gold_sql", found, reason)


def _check(name: str, passed: bool, reason: str) -> Check:
    return Check(name=name, passed=passed, reason=None if passed else reason)


def quoted(values: Sequence[Mention]) -> str:
    return ", ".join(repr(value) if isinstance(value, str) else " or ".join(map(repr, value)) for value in values)
