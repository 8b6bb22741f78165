"""A figure is verified when the cells of the queries it cites give it, allowing for the rounding and
units the text shows. Nothing else counts: `DERIVATIONS` is the whole list, by the figure's form.

Rounding: a figure holds for a value within half a unit of its last digit (`6.9` for 6.85 up to 6.95;
`1.2M` for 1,150,000 up to 1,250,000). A hedged one reaches one unit of its last non-zero digit but
never more than 10% of itself, on the side its hedge says: `about 121,000` for 120,000 up to 122,000,
`about 300,000` for 270,000 up to 330,000; `over`, `more than`, `at least` only above it (`over
300,000` for 300,000 up to 330,000); `under`, `less than`, `at most`, `nearly`, `almost` only below it.
Signs are often in words (`fell 5%`, `12 minutes early`), so magnitudes are compared, with one rule: a
negative cell (or column total or average) gives only a figure written with a minus or next to a word
of decrease (`fell`, `lost`, `declined`, `negative`, `early`, ...: hedges.py), so
`$500 profit` is no -500. A percentage may be a cell that holds a percentage (26.07) or a fraction
(0.2607).

Which cells: the results of the queries the figure cites (its sentence's citations, else its
paragraph's, else the answer's; an answer that cites nothing is checked against every query of the
run), as ClickHouse printed them, every row the model was shown and the WITH TOTALS row. One cell, a row
count and whole-column totals and averages come from any of them. Derivations of two cells (sum,
difference, average, ratio, percentage, change, percentage points, a share's cell) use only the rows
the figure's sentence names by one of their text cells (`EWR had 15.5% more flights than LGA`; a cell
of fewer than 3 characters only as written, names.py), and every row of a result of at most 3 rows:
two arbitrary cells of a large table match almost any number by chance, and a sentence naming rows of
more than 200 cells has no two-cell derivation. Whole-column derivations need the whole result (no
"more rows").

Cost: the answer is model output, so the check is bounded whatever it holds: its first 50,000
characters and 100 figures, a sentence's words read once and its named rows found once (a long
sentence kept 400 to 800 characters either side of a figure), two-cell searches over sorted values.
And it keeps its time limit itself: given a `Deadline` (deadline.py), it looks at the clock at each
match, figure and row, and past it raises `CheckTimedOut`, so the work ends when the wait for it does.

Not caught, on purpose or not yet (tests/agent/figures/test_verify.py keeps them as known cases): a
cell passes whichever row the sentence ties it to (EWR's count written as JFK's); units are never
converted (hours written as minutes); a share of a row a sentence names only by another name (B6 as
JetBlue) in a result of more than 3 rows does not verify.
"""

from __future__ import annotations

import bisect
import calendar
from collections.abc import Sequence
from dataclasses import dataclass

from agent import linear_re
from agent.figures.deadline import Deadline, no_deadline
from agent.figures.extract import Figure, extract
from agent.figures.pool import Cell, Evidence, Pool, Ref, pool_of
from agent.figures.report import MAX_CELLS, MAX_FIGURES, FigureCheck, FigureReport

DERIVATIONS: dict[str, tuple[str, ...]] = {
    # a plain number, currency, abbreviated count
    "number": (
        "cell",  # one cell
        "row count",  # the number of rows of a whole cited result
        "sum",  # two related cells added, or a whole column's total
        "difference",  # two related cells subtracted
        "average",  # two related cells, or a whole column (at most 50 rows), averaged
    ),
    # 26%, 26 percent, 4.1 pp
    "percent": (
        "cell",  # a cell holding the percentage, or the fraction (x100)
        "percentage",  # 100 * a / b of two related cells
        "percentage change",  # 100 * (a - b) / b of two related cells
        "share of total",  # 100 * a / the total of a's whole column
        "percentage-point difference",  # a - b of two related percentage (or fraction) cells
    ),
    "multiple": ("cell", "ratio"),  # 2.3x, 2.3 times: a cell, or a / b of two related cells
    "date": ("cell",),  # a Date or DateTime cell (or a string cell) with that day
    "time": ("cell",),  # a DateTime or time-of-day string cell with that hour and minute
}
# Words that state a number as a bound (a filter or a limit), right before it or right after it: only
# then is a number the cited SQL holds as a literal the query's own condition, not its result.
_BOUND_BEFORE = linear_re.compile(
    r"(?:than|within|up to|limit(?:ed)?(?: to| of)?|top|first|beyond|exceed(?:s|ing)?|>=?|<=?|≥|≤|=)\s*[$€£¥]?\s*$"
)
_BOUND_AFTER = linear_re.compile(
    r"^\s*(?:\+|or (?:more|less|fewer|longer|shorter|above|over|below|under|higher|lower))"
)
_BOUND_REACH = 24
_MAX_AVERAGED_ROWS = 50
_EPSILON = 1e-9
_HEDGE_REACH = 0.1  # a hedged figure is at most this far (a share of it) from the value it stands for
MAX_ANSWER_CHARS = 50_000  # an answer is checked up to here; past it, its figures go unchecked


def check_answer(
    answer: str, *, question: str, evidence: Sequence[Evidence], deadline: Deadline | None = None
) -> FigureReport:
    """Every figure of `answer`, verified or not (and why); numbers that are not claims are counted.
    Past `deadline`, `CheckTimedOut` (deadline.py)."""
    deadline = deadline or no_deadline()
    found = extract(answer[:MAX_ANSWER_CHARS], question[:MAX_ANSWER_CHARS], deadline, limit=MAX_FIGURES)
    by_id = {e.id: e for e in evidence}
    pools: dict[tuple[str, ...], Pool] = {}
    checks: list[FigureCheck] = []
    not_claims = len(found.not_claims)
    for figure in found.figures[:MAX_FIGURES]:
        deadline.check()
        ran = tuple(q for q in figure.citations if q in by_id and by_id[q].result.ok)
        if figure.cited_where == "none":
            ran = tuple(e.id for e in evidence if e.result.ok)
        pool = pools.get(ran)
        if pool is None:
            pool = pools[ran] = pool_of([by_id[q] for q in ran], deadline)
        if _in_sql(figure, pool, answer):
            not_claims += 1
            continue
        check = _check(figure, pool, ran, by_id)
        if not check.verified and _period_boundary(figure):
            not_claims += 1  # `from January 1 to December 31, 2013`: the period asked about, not a finding
            continue
        checks.append(check)
    return FigureReport(figures=checks, not_claims=not_claims, partly=_partly(answer, found.figures))


def _partly(answer: str, figures: Sequence[Figure]) -> str | None:
    """Why figures of the answer went unchecked past the check's bounds: said, never left unmarked."""
    if len(figures) > MAX_FIGURES:
        return f"only its first {MAX_FIGURES} figures were checked; the figures after them were not"
    if len(answer) > MAX_ANSWER_CHARS:
        return f"only its first {MAX_ANSWER_CHARS:,} characters were checked; the figures after them were not"
    return None


def _check(figure: Figure, pool: Pool, ran: tuple[str, ...], by_id: dict[str, Evidence]) -> FigureCheck:
    found = _verify(figure, pool) if ran else None
    return FigureCheck(
        text=figure.text,
        start=figure.start,
        end=figure.end,
        citations=list(figure.citations),
        verified=found is not None,
        checked_against=list(ran),
        how=found[0] if found else None,
        cells=[c.ref.reported() for c in found[1][:MAX_CELLS]] if found else [],
        reason=None if found else _why_not(figure, pool, ran) if ran else _nothing_to_check(figure, by_id),
    )


def _nothing_to_check(figure: Figure, by_id: dict[str, Evidence]) -> str:
    if not figure.citations:
        return "it cites no query, and no query of this answer returned a result"
    missing = [q for q in figure.citations if q not in by_id]
    if missing:
        return f"it cites {', '.join(missing)}, which never ran"
    return f"{', '.join(figure.citations)} failed, so there is no result to hold it"


def _why_not(figure: Figure, pool: Pool, ran: tuple[str, ...]) -> str:
    where = ", ".join(ran)
    if figure.kind in ("date", "time"):
        return f"no cell of {where} holds that {figure.kind}"
    reading = figure.readings[0]
    nearest = min(pool.cells, key=lambda c: abs(abs(c.value) - abs(reading.value)), default=None)
    close = f"; the nearest cell is {nearest.ref.value} ({_place(nearest.ref)})" if nearest else ""
    listed = ", ".join(DERIVATIONS[figure.kind][1:])
    return (
        f"no cell of {where} gives it at the precision shown, nor does a derivation the check allows ({listed}){close}"
    )


def _place(ref: Ref) -> str:
    row = "totals" if ref.row is None else f"row {ref.row}"
    return f"{ref.query_id}, {row}, {ref.column}"


def _in_sql(figure: Figure, pool: Pool, answer: str) -> bool:
    """A number or date the cited query's own SQL holds: a filter or a limit the answer repeats. A number
    is one only where the answer states it as a bound (`over 1,000 miles`, `limited to 100`): `1,000
    long-haul flights` states it as the result, and is checked."""
    if figure.kind == "date" and figure.date is not None:
        year, month, day = figure.date
        return any((year is None or y == year) and m == month and d == day for y, m, d in pool.sql_dates)
    if figure.kind == "number":
        held = any(r.value in pool.sql_numbers and r.step >= 1 for r in figure.readings)
        return held and _stated_as_bound(figure, answer)
    return False


def _stated_as_bound(figure: Figure, answer: str) -> bool:
    if figure.hedge in ("over", "under"):  # `over 1,000`, `at least 1,000`, `below 15`
        return True
    before = answer[max(0, figure.start - _BOUND_REACH) : figure.start].lower()
    after = answer[figure.end : figure.end + _BOUND_REACH].lower()
    return _BOUND_BEFORE.search(before) is not None or _BOUND_AFTER.search(after) is not None


def _period_boundary(figure: Figure) -> bool:
    """The first or last day of a month, which answers name to say what period they cover."""
    if figure.kind != "date" or figure.date is None:
        return False
    year, month, day = figure.date
    last = calendar.monthrange(year if year is not None else 2001, month)[1]
    return day in (1, last)


def _verify(figure: Figure, pool: Pool) -> tuple[str, list[Cell]] | None:
    if figure.kind == "date":
        return _date_cell(figure, pool)
    if figure.kind == "time":
        return _time_cell(figure, pool)
    related = pool.related(figure.sentence)
    for reading in figure.readings:
        target, tolerance = _window(figure, reading.value, reading.step)
        tolerance = tolerance * (1 + _EPSILON) + _EPSILON
        check = {"number": _number, "percent": _percent, "multiple": _multiple}[figure.kind]
        found = check(_Target(target, tolerance, figure.decrease, reading.step >= 1), pool, related)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class _Target:
    value: float  # the magnitude sought
    tol: float
    negatives: bool  # a negative cell may give it (the figure has a minus, or a word of decrease)
    whole: bool = True  # its digits show no decimal places: it may be a count (`1,000` read as 1.000 is none)


def _window(figure: Figure, value: float, step: float) -> tuple[float, float]:
    """The centre and half-width of the magnitudes the figure stands for."""
    value = abs(value)
    if not figure.hedged:
        return value, step / 2
    reach = min(step, _HEDGE_REACH * value)
    if figure.hedge == "over":
        return value + reach / 2, reach / 2
    if figure.hedge == "under":
        return value - reach / 2, reach / 2
    return value, reach


def _number(sought: _Target, pool: Pool, related: list[Cell]) -> tuple[str, list[Cell]] | None:
    target, tol = sought.value, sought.tol
    if cell := _one(pool, 1.0, sought):
        return "cell", [cell]
    for query_id, count in pool.row_counts:
        if sought.whole and abs(count - target) <= tol:
            return "row count", [Cell(count, Ref(query_id, None, "(rows)", str(count)))]
    for column in pool.columns:
        if _gives(sum(c.value for c in column), sought):
            return "sum", column
    if pair := _pair(related, target, tol, add=True):
        return "sum", pair
    if pair := _pair(related, target, tol):
        return "difference", pair
    for column in pool.columns:
        if len(column) <= _MAX_AVERAGED_ROWS and _gives(sum(c.value for c in column) / len(column), sought):
            return "average", column
    if pair := _pair(related, target, tol, add=True, halve=True):
        return "average", pair
    return None


def _percent(sought: _Target, pool: Pool, related: list[Cell]) -> tuple[str, list[Cell]] | None:
    target, tol = sought.value, sought.tol
    if cell := _one(pool, 1.0, sought):
        return "cell", [cell]
    if cell := _one(pool, 100.0, sought):
        return "cell", [cell]
    ratio, ratio_tol = target / 100, tol / 100
    if pair := _ratio(related, ratio, ratio_tol):
        return "percentage", pair
    for change in (1 + ratio, 1 - ratio):
        if pair := _ratio(related, change, ratio_tol):
            return "percentage change", pair
    for column in pool.columns:
        total = sum(c.value for c in column)
        named = {id(c) for c in related}
        if total and (
            share := next((c for c in column if id(c) in named and abs(c.value / total - ratio) <= ratio_tol), None)
        ):
            return "share of total", [share]
    for scale in (1.0, 100.0):
        if pair := _pair(related, target, tol, scale=scale):
            return "percentage-point difference", pair
    return None


def _multiple(sought: _Target, pool: Pool, related: list[Cell]) -> tuple[str, list[Cell]] | None:
    if cell := _one(pool, 1.0, sought):
        return "cell", [cell]
    if pair := _ratio(related, sought.value, sought.tol):
        return "ratio", pair
    return None


def _one(pool: Pool, factor: float, sought: _Target) -> Cell | None:
    return next((c for c in pool.cells if _gives(c.value * factor, sought)), None)


def _gives(value: float, sought: _Target) -> bool:
    """A cell's (or a column's) value gives the figure: its magnitude, its sign if negative."""
    return (value >= 0 or sought.negatives) and abs(abs(value) - sought.value) <= sought.tol


def _pair(
    related: list[Cell],
    target: float,
    tol: float,
    *,
    add: bool = False,
    halve: bool = False,
    scale: float = 1.0,
) -> list[Cell] | None:
    """Two different related cells a, b with |a + b| (add) or |a - b|, halved or scaled, within `tol` of
    `target`: for each a, the b that would do is looked up in the sorted values."""
    wanted = target * (2 if halve else 1) / scale
    width = tol * (2 if halve else 1) / scale
    values = [c.value for c in related]
    for a in related:
        centres = (wanted - a.value, -wanted - a.value) if add else (a.value + wanted, a.value - wanted)
        for centre in centres:
            b = _between(related, values, centre - width, centre + width, a)
            if b is not None:
                return [a, b]
    return None


def _ratio(related: list[Cell], ratio: float, tol: float) -> list[Cell] | None:
    """Two different related cells a, b (b not zero) with |a / b| within `tol` of `ratio`."""
    values = [c.value for c in related]
    for b in related:
        if b.value == 0:
            continue
        for wanted in (ratio, -ratio):
            low, high = sorted((b.value * (wanted - tol), b.value * (wanted + tol)))
            a = _between(related, values, low, high, b)
            if a is not None:
                return [a, b]
    return None


def _between(cells: list[Cell], values: list[float], low: float, high: float, other: Cell) -> Cell | None:
    start = bisect.bisect_left(values, low - _EPSILON)
    for index in range(start, len(values)):
        if values[index] > high + _EPSILON:
            return None
        if cells[index].ref != other.ref:
            return cells[index]
    return None


def _date_cell(figure: Figure, pool: Pool) -> tuple[str, list[Cell]] | None:
    assert figure.date is not None
    year, month, day = figure.date
    for ref in pool.on_day(month, day):
        if year is None or ref.value.startswith(f"{year:04d}-"):
            return "cell", [Cell(0.0, ref)]
    return None


def _time_cell(figure: Figure, pool: Pool) -> tuple[str, list[Cell]] | None:
    assert figure.time is not None
    hour, minute, second = figure.time
    wanted = f"{hour:02d}:{minute:02d}" + (f":{second:02d}" if second is not None else "")
    short = f"{hour}:{minute:02d}"
    for ref in pool.texts:
        clock = ref.value[11:] if len(ref.value) >= 16 and ref.value[10] in " T" else ref.value
        if clock.startswith(wanted) or clock.startswith(short):
            return "cell", [Cell(0.0, ref)]
    return None
