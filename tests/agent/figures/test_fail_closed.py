"""The figure check never fails open (issue 26): digits of any length are read, extraction takes time
linear in the dates of an answer, and the check stops itself at its deadline. Results are built by
hand: the cells are what matters, not the engine.

Times are compared with a baseline measured in the same test (CPU time, the best of a few runs), never
with an absolute limit."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from agent.db import QueryResult
from agent.figures import CheckTimedOut, Deadline, Evidence, FigureReport, check_answer
from agent.figures.extract import extract

ORIGINS = [["EWR", "120835"], ["JFK", "111279"], ["LGA", "104662"]]
HUGE = "9" * 5000  # past Python's 4,300-digit limit on int(str)


def _result(rows: list[list[str | None]], columns: tuple[str, ...] = ("origin", "n")) -> QueryResult:
    return QueryResult(query_id="x", sql="SELECT 1", columns=list(columns), types=["String"] * len(columns), rows=rows)


def _check(answer: str, rows: list[list[str | None]] = ORIGINS, **kwargs: object) -> FigureReport:
    evidence = [Evidence("Q1", "SELECT origin, count() AS n FROM t", _result(rows))]
    return check_answer(answer, question="", evidence=evidence, **kwargs)  # type: ignore[arg-type]


def _cpu(work: Callable[[], object], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best


# --- digits of any length ---


@pytest.mark.parametrize(
    "answer",
    [
        f"![{HUGE}](chart.png)\n\nEWR handled 42% of departures [Q1].",  # in an image's alt text
        f"EWR handled {HUGE} departures, 42% of them [Q1].",
    ],
)
def test_a_number_of_thousands_of_digits_is_read_and_the_false_figure_still_flagged(answer: str) -> None:
    report = _check(answer)
    assert report.unchecked is None
    assert {f.text: f.verified for f in report.figures}["42%"] is False


def test_a_number_of_thousands_of_digits_matches_no_cell() -> None:
    """Past a float's range it stands for infinity: no cell gives it, hedged or not."""
    for answer in (f"EWR had {HUGE} departures [Q1].", f"EWR had about 1{'0' * 5000} departures [Q1]."):
        (figure,) = _check(answer).figures
        assert figure.verified is False and len(figure.text) > 4300


def test_a_list_count_of_thousands_of_digits_is_read() -> None:
    report = _check(f"These {HUGE} airports:\n\n- EWR\n- JFK\n\n42% of flights [Q1].")
    assert [(f.text[:3], f.verified) for f in report.figures] == [("999", False), ("42%", False)]


# --- linear in dates ---


def _dates(count: int, between: str = ", ") -> str:
    return between.join(f"2013-{1 + i % 12:02d}-{1 + i % 28:02d}" for i in range(count))


def test_extraction_takes_time_linear_in_the_dates() -> None:
    """Every number (a date's year and day among them) was compared with every date: four times the
    dates took sixteen times as long."""
    small, large = _dates(1000), _dates(4000)
    ratio = _cpu(lambda: extract(large)) / _cpu(lambda: extract(small))
    assert ratio < 8, f"4x the dates took {ratio:.1f}x the time"


def test_a_date_dense_answer_checks_about_as_fast_as_plain_text() -> None:
    """50,000 characters: dates against prose of the same length (benchmarks/bench_figures.py reports it)."""
    dates = ", ".join(f"2013-{1 + i % 12:02d}-{1 + i % 28:02d}" for i in range(4200))[:50_000]
    plain = ("The weather was fine and nothing much happened at all that day. " * 800)[:50_000]
    ratio = _cpu(lambda: _check(dates + " [Q1]")) / _cpu(lambda: _check(plain + " [Q1]"))
    assert ratio < 4, f"dates took {ratio:.1f}x the time of plain text"


# --- the deadline ends the work ---


class _Clock:
    """A clock that passes the deadline at its `expire_at`-th reading, and counts the readings after."""

    def __init__(self, expire_at: int) -> None:
        self.readings = 0
        self._expire_at = expire_at

    def __call__(self) -> float:
        self.readings += 1
        return 1.0 if self.readings >= self._expire_at else 0.0


def test_the_check_stops_at_the_first_step_past_its_deadline() -> None:
    claims = " ".join(f"EWR had {k},{k:03d} flights [Q1]." for k in range(100, 200))
    answer = f"{_dates(300, ': 100 flights. ')} {claims}"
    whole = Deadline(None)  # counts the steps of the whole check
    _check(answer, deadline=whole)
    for expire_at in (1, whole.steps // 3, whole.steps):
        clock = _Clock(expire_at)
        with pytest.raises(CheckTimedOut):
            _check(answer, deadline=Deadline(1.0, clock=clock))
        assert clock.readings == expire_at  # not one step after the deadline passed


def test_a_check_within_its_deadline_is_unchanged() -> None:
    answer = "EWR had 120,835 departures [Q1], JFK 111,279 [Q1]; together 232,114 [Q1]."
    within = _check(answer, deadline=Deadline.after(60))
    assert within == _check(answer) and within.verified == 3


def test_figures_past_the_first_hundred_are_said_to_be_unchecked() -> None:
    answer = " ".join(f"EWR had {120835 + i} flights [Q1]." for i in range(150))
    report = _check(answer)
    assert report.checked == 100
    assert report.partly is not None and "first 100 figures" in report.partly
    assert _check("EWR had 120835 flights [Q1].").partly is None


def test_figures_past_the_text_checked_are_said_to_be_unchecked() -> None:
    answer = "EWR had 120835 flights [Q1]. " + "Plain words. " * 4000 + "JFK had 87 flights [Q1]."
    report = _check(answer)
    assert report.checked == 1 and report.verified == 1  # the false 87 lies past the text checked ...
    assert report.partly is not None and "50,000 characters" in report.partly  # ... and is not left unmarked
