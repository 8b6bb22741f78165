"""Review 3, section 3: a false figure shown with no mark. Each case is text a reader sees (CommonMark as
marked renders it, then DOMPurify) whose figure the check skipped, or a count the check took for the
cited SQL's filter."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from agent.db import QueryResult
from agent.figures import Evidence, FigureReport, check_answer
from agent.figures.extract import extract

ORIGINS = [["EWR", "120835"], ["JFK", "111279"], ["LGA", "104662"]]


def _result(rows: list[list[str | None]]) -> QueryResult:
    return QueryResult(query_id="x", sql="SELECT 1", columns=["origin", "n"], types=["String"] * 2, rows=rows)


def _check(answer: str) -> FigureReport:
    evidence = [Evidence("Q1", "SELECT origin, count() AS n FROM t GROUP BY origin", _result(ORIGINS))]
    return check_answer(answer, question="", evidence=evidence)


def _marked(report: FigureReport) -> bool:
    """The false figure shows a mark: some figure is unverified (no true one is in these answers), or
    the report says some or all went unchecked."""
    if report.unchecked or report.partly:
        return True
    return any(not f.verified for f in report.figures)


# --- 3. the figure check: a false figure shown with no mark ---


@pytest.mark.parametrize(
    "answer",
    [
        # A lone ``` mid-line renders as three literal backticks (CommonMark, marked): the text after it
        # is plain prose, but the check's _CODE pattern masks everything to the end of the answer.
        "Use the ``` key to quote. EWR had 999,999 departures [Q1].",
        # `<` ... `>` on one line is no HTML tag (it does not start with a letter), so it shows as
        # written; _CODE's `<[^<>\n]*>` masks all between them.
        "Flights delayed < 15 minutes at EWR: 999,999 (> JFK's) [Q1].",
        "EWR had <999,999> departures [Q1].",
        # `<!--` with no `-->` mid-line is literal text (CommonMark inline HTML needs the whole comment);
        # rendered.py's `<!--.*?(?:-->|\z)` drops everything after it.
        "EWR <!-- had 999,999 departures [Q1].",
        # A Markdown heading is read as a rank (`#1`): the figure shows in large type, unchecked.
        "# 999,999 departures at EWR\n\nThat is the most of the three airports [Q1].",
        "## 999,999\n\nEWR's departures in 2013 [Q1].",
        # Exponent form: 9.99e5 reads as 999,000 to anyone who reads it at all; the check sees two
        # numbers glued to letters.
        "EWR had 9.99e5 departures [Q1].",
        # Digits that are not decimal digits (Unicode No): superscripts show as digits.
        "EWR had ⁹⁹⁹ thousand departures [Q1].",
        "EWR had 1e999999 departures [Q1].",
        "EWR ranked ⑨ with 120,835 departures [Q1].",
        "EWR had Ⅸ hundred thousand departures [Q1].",
        "EWR had ½ million departures [Q1].",
        # a tag-like run that is no tag in CommonMark (`999,999` is no attribute name): shown as written
        "EWR had <b 999,999 > departures [Q1].",
    ],
)
def test_a_false_figure_in_prose_is_marked(answer: str) -> None:
    report = _check(answer)
    assert _marked(report), report.model_dump()


@pytest.mark.parametrize(
    "answer",
    [
        "There were 1,000 long-haul flights [Q1].",  # the filter's threshold stated as the count
        "Exactly 100 flights flew over 1,000 miles [Q1].",  # the LIMIT stated as the count
    ],
)
def test_a_count_equal_to_a_literal_of_the_cited_sql_is_still_checked(answer: str) -> None:
    """A number the cited SQL holds as a literal is dropped as a not-claim wherever it stands, so the
    commonest slip, restating the filter's threshold or the LIMIT as the result, shows with no mark:
    the query counted 132,140 flights."""
    sql = "SELECT count() AS n FROM nycflights13.flights WHERE distance > 1000 LIMIT 100"
    result = QueryResult(query_id="x", sql=sql, columns=["n"], types=["UInt64"], rows=[["132140"]])
    report = check_answer(answer, question="", evidence=[Evidence("Q1", sql, result)])
    assert _marked(report), report.model_dump()


def _cpu(work: Callable[[], object], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best


@pytest.mark.parametrize("unit", ["<!-- &amp; 12,345 ", '<b x="&amp; 12,345 ', "``` 1 ", "<a 1,234 &amp; "])
def test_markup_that_never_closes_is_read_in_linear_time(unit: str) -> None:
    """A comment, a tag's quoted value, a fence, read only where they close: a candidate that never
    closes must end at the next `<` or line, not at the end of the answer each time (quadratic)."""
    ratio = _cpu(lambda: extract(unit * 4000)) / _cpu(lambda: extract(unit * 1000))
    assert ratio < 8, f"4x the text took {ratio:.1f}x the time"


def test_a_footnote_mark_after_a_figure_leaves_the_figure_whole() -> None:
    """`120,835¹`: the superscript is read as a number of its own, not glued on (`120,8351` reads as
    nothing, and the figure would go unchecked)."""
    report = _check("EWR had 999,999¹ departures [Q1].\n\n¹ In 2013.")
    assert any(f.text == "999,999" and not f.verified for f in report.figures), report.model_dump()
