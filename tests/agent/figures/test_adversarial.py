"""Figures written to slip past the check, and answers written to make it slow (an outside review's
cases). Results are built by hand: the cells are what matters, not the engine."""

from __future__ import annotations

import pytest

from agent.db import QueryResult
from agent.figures import Evidence, FigureReport, check_answer
from tests.timing import growth, linear_limit

ORIGINS = [["EWR", "120835"], ["JFK", "111279"], ["LGA", "104662"]]


def _result(rows: list[list[str | None]], columns: tuple[str, ...] = ("origin", "n")) -> QueryResult:
    return QueryResult(query_id="x", sql="SELECT 1", columns=list(columns), types=["String"] * len(columns), rows=rows)


def _check(answer: str, rows: list[list[str | None]], sql: str = "SELECT origin, count() AS n FROM t") -> FigureReport:
    return check_answer(answer, question="", evidence=[Evidence("Q1", sql, _result(rows))])


def _verdicts(report: FigureReport) -> dict[str, bool]:
    return {f.text: f.verified for f in report.figures}


# --- H1: a hedge allows a little, in the direction it says ---


@pytest.mark.parametrize(
    ("answer", "rows", "figure"),
    [
        ("EWR had nearly 1 million flights [Q1].", ORIGINS, "1 million"),
        ("Over 1 billion passengers flew from EWR [Q1].", ORIGINS, "1 billion"),
        ("More than 1,000 flights were cancelled [Q1].", [["cancelled", "3"], ["diverted", "5"]], "1,000"),
        ("EWR had nearly 100% of LGA's flights [Q1].", [ORIGINS[0], ORIGINS[2]], "100%"),  # 115%, or 87%
        ("About 10% were cancelled [Q1].", [["cancelled", "3"]], "10%"),
        ("Over 300,000 flights left [Q1].", [["all", "200001"]], "300,000"),
        ("Over 300,000 flights left [Q1].", [["all", "299000"]], "300,000"),  # not over
        ("Under 300,000 flights left [Q1].", [["all", "300500"]], "300,000"),  # not under
        ("Nearly 300,000 flights left [Q1].", [["all", "301000"]], "300,000"),  # past it
        ("About 300,000 flights left [Q1].", [["all", "250000"]], "300,000"),  # 17% off
    ],
)
def test_a_hedge_does_not_stretch_to_any_cell(answer: str, rows: list[list[str | None]], figure: str) -> None:
    assert _verdicts(_check(answer, rows)) == {figure: False}


@pytest.mark.parametrize(
    ("answer", "rows"),
    [
        ("Over 300,000 flights left [Q1].", [["all", "326776"]]),
        ("More than 120,000 flights left EWR [Q1].", ORIGINS),
        ("Nearly 121,000 flights left EWR [Q1].", ORIGINS),
        ("Under 340,000 flights left [Q1].", [["all", "336776"]]),
        ("About 121,000 flights left EWR [Q1].", ORIGINS),
        ("About 120,000 flights left EWR [Q1].", ORIGINS),
        ("Nearly 1 million flights left [Q1].", [["all", "960000"]]),
    ],
)
def test_a_hedge_holds_near_and_on_its_side(answer: str, rows: list[list[str | None]]) -> None:
    assert list(_verdicts(_check(answer, rows)).values()) == [True]


# --- H2: the cost of a check is bounded whatever the answer ---


# The check's time grows linearly in the answer (tests/timing.py): eight times the text, about eight times
# the time, not sixty-four.
GROWTH = 8


def test_a_thousand_occurrences_of_a_short_label_check_in_time_linear_in_the_answer() -> None:
    carriers = _result([["AA", str(1000 + j)] for j in range(50)], ("carrier", "n"))
    evidence = [Evidence(f"Q{i}", "SELECT carrier, count() AS n FROM t", carriers) for i in (1, 2, 3)]

    def answer(scale: int) -> str:
        return "a" * 500 * scale + " " + " ".join(f"{k}.5" for k in range(13 * scale)) + " [Q1][Q2][Q3]"

    grew = growth(lambda text: check_answer(text, question="", evidence=evidence), answer(1), answer(GROWTH))
    assert grew < linear_limit(GROWTH), f"{grew:.0f}x as long on {GROWTH}x the answer"


def test_many_labels_in_a_long_answer_check_in_time_linear_in_the_answer() -> None:
    labels = ["ab", "cd", "ef", "gh", "ij", "kl", "mn", "op"]
    columns = (*[f"l{i}" for i in range(8)], "n")
    rows: list[list[str | None]] = [[*labels, str(500 + j)] for j in range(51)]
    evidence = [Evidence(f"Q{i}", "SELECT 1", _result(rows, columns)) for i in range(1, 11)]
    cites = "".join(f"[Q{i}]" for i in range(1, 11))

    def answer(scale: int) -> str:  # 6.8 KB at the scale of 8
        return "".join(labels) * 50 * scale + " " + " ".join(f"{k}.25" for k in range(13 * scale)) + " " + cites

    grew = growth(lambda text: check_answer(text, question="", evidence=evidence), answer(1), answer(GROWTH))
    assert grew < linear_limit(GROWTH), f"{grew:.0f}x as long on {GROWTH}x the answer"


# --- M2: what the reader sees is what is checked ---


@pytest.mark.parametrize(
    "hidden", ["&#49;20,835", "1\u200b20,835", "1<!-- -->20,835", "1<span>20,835</span>", "&#x31;20,835"]
)
def test_a_number_split_by_markup_is_read_whole(hidden: str) -> None:
    answer = f"EWR had {hidden} departures [Q1]."
    report = _check(answer, [["EWR", "20835"]])
    (figure,) = report.figures
    assert (figure.text, figure.verified) == ("120,835", False)
    assert answer[figure.start] in "&1" and answer[figure.end - 1] in "5>"


def test_a_number_in_an_sql_comment_is_still_a_claim() -> None:
    sql = "SELECT origin, count() AS n /* 987654 */ FROM t -- 555555\nWHERE note = '444444' LIMIT 10"
    report = _check("EWR had 987,654 departures, JFK 555,555, LGA 444,444 [Q1].", ORIGINS, sql)
    assert _verdicts(report) == {"987,654": False, "555,555": False, "444,444": False}


def test_a_number_the_sql_filters_on_is_not_a_claim() -> None:
    sql = "SELECT count() AS n FROM t WHERE distance > 1000 /* a /* nested */ comment */ AND x = 'it''s 7'"
    report = _check("11 flights were longer than 1,000 miles [Q1].", [["11"]], sql)
    assert _verdicts(report) == {"11": True} and report.not_claims == 1


def test_a_grouped_number_is_not_a_year() -> None:
    assert _verdicts(_check("1,950 flights were cancelled [Q1].", ORIGINS)) == {"1,950": False}


# --- M5: a short label names its row only as written ---


def test_a_two_letter_cell_is_not_named_by_a_common_word() -> None:
    rows: list[list[str | None]] = [["IN", "100"], ["OR", "37"], ["OK", "12"], ["PA", "40"], ["TX", "55"]]
    report = _check("Flights in or out of the state rose by 63 [Q1].", rows, "SELECT state, count() FROM t")
    assert _verdicts(report) == {"63": False}
    assert _verdicts(_check("Flights in OR and PA differ by 3 [Q1].", rows)) == {"3": True}


# --- L1: a negative cell is not a positive figure ---


def test_a_negative_cell_verifies_only_a_negative_figure() -> None:
    rows = [["EWR", "-500"]]
    assert _verdicts(_check("EWR made a $500 profit [Q1].", rows)) == {"$500": False}
    assert _verdicts(_check("EWR made a profit of -500 [Q1].", rows)) == {"-500": True}
    assert _verdicts(_check("EWR lost $500 [Q1].", rows)) == {"$500": True}
    assert _verdicts(_check("Profit fell by 500 dollars [Q1].", rows)) == {"500": True}
