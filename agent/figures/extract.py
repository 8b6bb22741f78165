"""The figures of an answer, each with the [Qn] citations near it, and the numbers that are not claims.

The answer is read as it renders (rendered.py: entities decoded, HTML comments and tags and invisible
format characters dropped), so `&#49;20,835` is the figure `120,835`; a figure's `text` is as it
renders, its `start`/`end` are offsets in the text as written.

A figure is a number the answer states as a fact: an integer with separators (`120,835`, `120.835`,
`120 835` with a no-break space, `120'835`), a decimal (`6.9`, `6,9`), a percentage (`26%`, `26 percent`,
`4.1 pp`, `4.1 points`), currency (`$1,200`, `€3.4M`), an abbreviated count (`1.2M`, `120.8K`, `3 billion`, `2 Mio.`), a
multiple (`2.3x`, `2.3 times`), a date (`2013-11-27`, `November 27, 2013`, `27 Nov 2013`) or a time
(`17:05`, `5:05 pm`); an exponent (`9.99e5`) is read. A separator that could be either (`1,234`,
`1.234`) is read both ways; the figure holds when either reading does.

Not claims, told apart by their form and place, never checked (`Extracted.not_claims` says why for
each): citations and other numbers glued to letters (`Q1`, `Q4 2013`, `B6`, `N14228`, `A320`), code,
link targets, raw HTML tags, years (a bare 1900-2100 four-digit integer, no separator: `in 2013`,
`July 2013`; `1,950 flights` is a figure), ordinals (`3rd`), the numbers
of a Markdown ordered list, ranks and limits (`top 5`, `first 10`, `#1`), a number that names
something (`Paragraph 3`, `flight 1545`, `Terminal 4`), a count equal to the number of items a list or
table of the answer shows (`these 3 airports:` over three bullets), numbers the question itself holds,
and (decided in verify.py, which knows the citations) numbers and dates the cited query's SQL states
as literals (its filters and limits: `flights over 1,000 miles`; not in its comments: sql_literals.py),
a number only where the answer states it as a bound (`1,000 long-haul flights` is checked),
and a first or last day of a month that no cell holds (the period an answer covers: `from January 1 to
December 31, 2013`).

The answer is model output: every pattern here runs on RE2 (agent/linear_re.py), in time linear in it,
and so does the rest: a number is placed among the dates, lines, sentences and paragraphs by bisection,
and what a line or a sentence tells is worked out once for it, not once for each number it holds. Digits
are read as `Decimal` (no limit on their length; `int` refuses a string of over 4,300 digits), and a
number too large for a float stands for infinity, which no cell gives. The check looks at its deadline
(deadline.py) at each match.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal, NamedTuple

from agent import linear_re
from agent.figures.deadline import Deadline, no_deadline
from agent.figures.hedges import Hedge, decrease_beside, hedge_before
from agent.figures.rendered import Rendered, render

Kind = Literal["number", "percent", "multiple", "date", "time"]

_CITATION = linear_re.compile(r"\[\s*(Q\d+(?:\s*(?:,|;|/|&|and)\s*Q?\d+)*)\s*\]")
_CITED_ID = linear_re.compile(r"Q?(\d+)")
# Code, link targets, URLs and autolinks: what shows as code or not at all. A fence opens and closes only
# at a line's start (a ``` mid-line is literal backticks, or a code span); rendered.py has dropped HTML
# tags already, so a `<...>` left is an autolink (`<https://...>`, `<a@b.org>`) or text as written.
_CODE = linear_re.compile(
    r"^[ \t>]*```.*?(?:\n[ \t>]*```|\z)|`[^`\n]*`|\]\([^)\n]*\)|https?://\S+"
    r"|<[A-Za-z][A-Za-z0-9+.-]{1,31}:[^<>\s]*>|<[^<>\s@]+@[^<>\s]+>",
    dot_all=True,
    multiline=True,
)
_MONTHS = "jan|january|feb|february|mar|march|apr|april|may|jun|june|jul|july|aug|august|sep|sept|september|oct|october|nov|november|dec|december"  # noqa: E501
_MONTH_OF = [1, 1, 2, 2, 3, 3, 4, 4, 5, 6, 6, 7, 7, 8, 8, 9, 9, 9, 10, 10, 11, 11, 12, 12]
_DATE_PATTERN = (
    r"(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2}))?)?"
    rf"|({_MONTHS})\.? (\d{{1,2}})(?:st|nd|rd|th)?(?:,? (\d{{4}}))?"
    rf"|(\d{{1,2}})(?:st|nd|rd|th)? ({_MONTHS})\.?(?:,? (\d{{4}}))?"
    r"|(\d{1,2}):(\d{2})(?::(\d{2}))?(?:\s?([ap])\.?m\.?)?"
)
_DATE = linear_re.compile(_DATE_PATTERN, ignore_case=True)
# The same without its groups, to find dates: RE2 then needs no submatches, three times faster a match.
_DATE_SPAN = linear_re.compile(
    _DATE_PATTERN.replace("(?:", "\0").replace("(", "(?:").replace("\0", "(?:"), ignore_case=True
)
_ASCII_DIGITS = frozenset("0123456789")
_SEPARATORS = ",.'’\u00a0\u202f\u2009"
_SPACE_LIKE = "'’\u00a0\u202f\u2009"
_NUMBER = linear_re.compile(
    r"([$€£¥]\s?)?([-−])?(\d(?:[\d,.'’\u00a0\u202f\u2009]*\d)?(?:[eE][-+−]?\d+)?)"
    r"(\s?%|\s(?:percentage points?|points?|[Pp]ercent|per cent|pp)|\s?(?:bn|mn|[kKMB])"
    r"|\s(?:thousand|million|billion|trillion|Mio\.?|Mrd\.?)|\s?[x×]|\s(?:times|-fold)|-fold)?"
)
_SCALES = {
    "k": 3, "K": 3, "thousand": 3, "M": 6, "mn": 6, "million": 6, "Mio": 6, "Mio.": 6,
    "B": 9, "bn": 9, "billion": 9, "Mrd": 9, "Mrd.": 9, "trillion": 12,
}  # fmt: skip
_SENTENCE_REACH = 400  # a long sentence is kept only this far (or up to twice) either side of a figure
# `#1` (the `#` touching the digits) is a rank too; `# 120,835` is a Markdown heading, a figure in large type
_RANKS = ("top", "first", "last", "bottom", "rank", "no.", "number")
_MAX_POWER = 400  # 1e400 is past a float's range (infinity) and 1e-400 below it (zero) already
# A number after one of these words names something (`Paragraph 3`, `flight 1545`, `terminal 4`).
_LABELS = (
    "paragraph", "part", "step", "option", "section", "item", "chapter", "phase", "table", "figure", "chart",
    "query", "line", "row", "column", "page", "case", "example", "version", "level", "tier", "group", "flight",
    "gate", "terminal", "runway", "route", "bus", "platform", "room", "q",
)  # fmt: skip
_LIST_ITEM = linear_re.compile(r"\s*(?:[-*+•]|\d+[.)])\s")
_ORDINALS = ("st", "nd", "rd", "th")


@dataclass(frozen=True)
class Reading:
    """One way to read the figure's digits: its value (units applied) and the step of its last digit."""

    value: float
    step: float


@dataclass(frozen=True)
class Figure:
    text: str
    start: int
    end: int
    kind: Kind
    readings: tuple[Reading, ...] = ()  # numbers, percentages (in percent), multiples
    date: tuple[int | None, int, int] | None = None  # (year, month, day)
    time: tuple[int, int, int | None] | None = None  # (hour, minute, second)
    hedged: bool = False  # "about 340,000": near it, see verify.py
    hedge: Hedge | None = None
    decrease: bool = False  # written with a minus, or next to a word of decrease: may stand for a negative cell
    citations: tuple[str, ...] = ()  # the [Qn] near it: its sentence's, else its paragraph's, else the answer's
    cited_where: Literal["sentence", "paragraph", "answer", "none"] = "none"
    sentence: str = ""  # the sentence it stands in (at most _SENTENCE_REACH either side): the rows it names


@dataclass(frozen=True)
class Extracted:
    figures: list[Figure]
    not_claims: list[tuple[str, str]]  # (text, why)
    citations: list[str]  # every Q id the answer cites, in order


def extract(written: str, question: str = "", deadline: Deadline | None = None, limit: int | None = None) -> Extracted:
    """The figures of the answer as it renders (rendered.py); their `start`/`end` are offsets in `written`.
    With a `limit`, reading stops at the figure after the first `limit` (kept, so a caller can tell there
    are more); the not-claims are those before it."""
    deadline = deadline or no_deadline()
    rendered = render(written, deadline)
    answer = rendered.text
    question = render(question, deadline).text
    masked = _mask(answer)
    citations = _citations(answer)
    near = _Nearby(answer, citations)
    context = _Context(answer, _plain_values(_mask(question)), _list_sizes(answer), _Lines(answer))
    question_dates = {f.date for f in _dates(_mask(question), deadline)}
    figures: list[Figure] = []
    not_claims: list[tuple[str, str]] = []
    for found in _in_order(masked, deadline):
        if isinstance(found, Figure):
            date = found.date
            if date is not None and (date in question_dates or (None, *date[1:]) in question_dates):
                not_claims.append((found.text, "in the question"))
            else:
                figures.append(found)
        else:
            _classify(found, context, figures, not_claims)
        if limit is not None and len(figures) > limit:
            break
    figures.sort(key=lambda f: f.start)
    placed = []
    for figure in figures:
        deadline.check()
        placed.append(_placed(figure, near, rendered))
    ordered = list(dict.fromkeys(q for c in citations for q in c.ids))
    return Extracted(figures=placed, not_claims=not_claims, citations=ordered)


@dataclass(frozen=True)
class _Context:
    """What tells a number of the answer from a claim: the answer, what the question holds, the sizes of
    the answer's lists and tables, its lines."""

    answer: str
    question_values: set[float]
    list_sizes: set[int]
    lines: _Lines


def _in_order(masked: str, deadline: Deadline) -> Iterator[Figure | _Number]:
    """The dates and times (as figures) and the number matches of the answer, in order, read as they are
    needed. Numbers are sought between the dates only: a date's digits (its year, its day) are no figure."""
    at = 0
    for date in _dates(masked, deadline):
        yield from _numbers_between(masked, at, date.start, deadline)
        yield date
        at = max(at, date.end)
    yield from _numbers_between(masked, at, len(masked), deadline)


def _numbers_between(masked: str, start: int, end: int, deadline: Deadline) -> Iterator[_Number]:
    gap = masked[start:end]
    if gap.isascii() and _ASCII_DIGITS.isdisjoint(gap):  # most gaps between dense dates: ", "
        return
    for match in _NUMBER.finditer(gap):
        deadline.check()
        yield _Number(match, start)


class _Number:
    """A match of _NUMBER in a part of the text, with its offsets in the whole."""

    def __init__(self, match: linear_re.Match, offset: int) -> None:
        self._match = match
        self._offset = offset

    def group(self, index: int) -> str | None:
        return self._match.group(index)  # type: ignore[no-any-return]

    def start(self, index: int) -> int:
        return self._match.start(index) + self._offset  # type: ignore[no-any-return]

    def end(self, index: int) -> int:
        return self._match.end(index) + self._offset  # type: ignore[no-any-return]


def _classify(match: _Number, context: _Context, figures: list[Figure], not_claims: list[tuple[str, str]]) -> None:
    """A number of the answer: a figure, or a not-claim (and why)."""
    answer = context.answer
    number, why = _number(answer, match, context.lines)
    if number is None:
        not_claims.append((answer[match.start(3) : match.end(3)], why))
        return
    why = _plain_not_claim(answer, number, context.question_values, context.list_sizes)
    if why:
        not_claims.append((number.text, why))
    else:
        figures.append(number)


class _Lines:
    """The answer's lines, to tell a list item's number (`3. EWR`): each line read once, when asked."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._starts = [0, *(i + 1 for i in _occurrences(text, "\n"))]
        self._opening: dict[int, int] = {}  # a line's start: where its first non-blank character is

    def opens_list_item(self, at: int) -> bool:
        """The number at `at` is the first thing on its line, and the line reads as a numbered item."""
        index = bisect.bisect_right(self._starts, at) - 1
        start = self._starts[index]
        end = self._starts[index + 1] if index + 1 < len(self._starts) else len(self._text)
        if start not in self._opening:
            line = self._text[start:end]
            self._opening[start] = start + len(line) - len(line.lstrip())
        return self._opening[start] >= at and _LIST_ITEM.match(self._text[start:end]) is not None


def _placed(figure: Figure, near: _Nearby, rendered: Rendered) -> Figure:
    """The figure with its sentence and citations, at its offsets in the text as written."""
    start, end = rendered.span(figure.start, figure.end)
    return Figure(**{**figure.__dict__, **near.place(figure), "start": start, "end": end})


def _mask(text: str) -> str:
    """`text` with code, link targets, URLs and citations blanked (same offsets)."""

    def blank(match: linear_re.Match) -> str:
        return " " * (match.end() - match.start())

    return _CITATION.sub(blank, _CODE.sub(blank, text))


class _Citation(NamedTuple):
    start: int
    end: int
    ids: tuple[str, ...]


def _citations(answer: str) -> list[_Citation]:
    found = []
    for match in _CITATION.finditer(_CODE.sub(lambda m: " " * (m.end() - m.start()), answer)):
        ids = tuple(f"Q{int(n)}" for n in _CITED_ID.findall(match.group(1)) if len(n) < 9)
        found.append(_Citation(match.start(), match.end(), ids))
    return found


class _Nearby:
    """Which citations sit near an offset: in its sentence (or just after its end), else its paragraph.
    Each sentence's and paragraph's citations are gathered once, however many figures it holds."""

    def __init__(self, answer: str, citations: list[_Citation]) -> None:
        self._answer = answer
        self._citations = citations
        self._positions = [c.start for c in citations]
        self._ends = {c.start: c.end for c in citations}
        self._everything = tuple(dict.fromkeys(q for c in citations for q in c.ids))
        self._sentence_ends = [i + 1 for i, c in enumerate(answer) if c in ".!?\n" and _ends_sentence(answer, i)]
        self._paragraph_ends = list(_occurrences(answer, "\n\n"))
        self._cited: dict[tuple[str, int, int], tuple[str, ...]] = {}

    def place(self, figure: Figure) -> dict[str, object]:
        """The figure's sentence and citations, as fields of a Figure."""
        start, end = _span(self._sentence_ends, figure.start, len(self._answer))
        block = figure.start - figure.start % _SENTENCE_REACH  # figures close together share a window
        start, end = max(start, block - _SENTENCE_REACH), min(end, block + 2 * _SENTENCE_REACH)
        placed: dict[str, object] = {"sentence": self._answer[start:end]}
        for where, bounds in (("sentence", self._sentence_ends), ("paragraph", self._paragraph_ends)):
            start, end = _span(bounds, figure.start, len(self._answer))
            ids = self._cited_in(where, start, end)
            if ids:
                return {**placed, "citations": ids, "cited_where": where}
        return {**placed, "citations": self._everything, "cited_where": "answer" if self._everything else "none"}

    def _cited_in(self, where: str, start: int, end: int) -> tuple[str, ...]:
        key = (where, start, end)
        if key not in self._cited:
            if where == "sentence":  # "… 120,835. [Q1]": a citation right after the sentence is its own
                while end < len(self._answer) and self._answer[end] in " \t":
                    end += 1
                end = self._ends.get(end, end)
            low, high = bisect.bisect_left(self._positions, start), bisect.bisect_left(self._positions, end)
            self._cited[key] = tuple(dict.fromkeys(q for c in self._citations[low:high] for q in c.ids))
        return self._cited[key]


def _span(ends: list[int], at: int, length: int) -> tuple[int, int]:
    index = bisect.bisect_right(ends, at)
    return (ends[index - 1] if index else 0), (ends[index] if index < len(ends) else length)


def _ends_sentence(text: str, i: int) -> bool:
    return text[i] == "\n" or (text[i] in ".!?" and (i + 1 == len(text) or text[i + 1].isspace()))


def _occurrences(text: str, part: str) -> Iterator[int]:
    """Where `part` starts in `text`, overlaps included."""
    at = text.find(part)
    while at >= 0:
        yield at
        at = text.find(part, at + 1)


def _dates(masked: str, deadline: Deadline) -> Iterator[Figure]:
    """The dates and times of `masked`, in order (a date with a time is two figures of one span)."""
    for found in _DATE_SPAN.finditer(masked):
        deadline.check()
        start, end = found.span()
        before = masked[start - 1] if start else " "
        after = masked[end] if end < len(masked) else " "
        if before.isalnum() or after.isdigit():
            continue
        text = masked[start:end]
        if text[4:5] == "-":  # the ISO form (only it has a dash there): its digits stand at fixed places
            yield from _iso(text, start, end)
            continue
        m = _DATE.fullmatch(text)
        assert m is not None  # the same pattern, on what it matched
        g = m.groups()
        if g[6] or g[10]:
            month = _MONTH_OF[_MONTHS.split("|").index((g[6] or g[10]).lower())]
            day = int(g[7] or g[9])
            year = _int(g[8] or g[11])
            if not 1 <= day <= 31:
                continue
            figure = Figure(text, start, end, "date", date=(year, month, day))
        else:
            hour = int(g[12]) + (12 if g[15] and g[15].lower() == "p" and int(g[12]) < 12 else 0)
            hour = 0 if g[15] and g[15].lower() == "a" and hour == 12 else hour
            if hour > 23 or int(g[13]) > 59:
                continue
            figure = Figure(text, start, end, "time", time=(hour, int(g[13]), _int(g[14])))
        yield figure


def _iso(text: str, start: int, end: int) -> Iterator[Figure]:
    """`2013-11-27`, perhaps with `17:05` or `17:05:09` after it: a date, and a time."""
    yield Figure(text, start, end, "date", date=(int(text[0:4]), int(text[5:7]), int(text[8:10])))
    if len(text) > 10:
        second = int(text[17:19]) if len(text) > 16 else None
        yield Figure(text, start, end, "time", time=(int(text[11:13]), int(text[14:16]), second))


def _int(text: str | None) -> int | None:
    return int(text) if text else None


def _number(answer: str, m: _Number, lines: _Lines) -> tuple[Figure | None, str]:
    """A figure from a number match, or None and why it is not a claim."""
    digits = m.group(3) or ""
    start, end = m.start(3), m.end(3)
    suffix = m.group(4) or ""
    before = answer[start - 1] if start else " "
    sign_start = m.start(2) if m.group(2) else start
    if m.group(2) and sign_start and (answer[sign_start - 1].isalnum()):
        sign_start = start  # a range (10-20) or a hyphenated name, not a minus
    if before.isalpha() or before == "_" or (before.isdigit()):
        return None, "part of a name (Q1, B6, N14228)"
    if before == "#":
        return None, "a rank"
    after_at = m.end(4) if suffix else end
    after = answer[after_at] if after_at < len(answer) else " "
    if suffix.strip() in ("k", "K", "M", "B", "bn", "mn", "x", "×") and after.isalpha():
        suffix, after_at = "", end  # "5 Main St": the letter starts a word
        after = answer[end] if end < len(answer) else " "
    if not suffix and after.isalpha():
        return None, "an ordinal" if answer[end : end + 2].lower() in _ORDINALS else "part of a name (737MAX)"
    if after in ".)" and lines.opens_list_item(start):
        return None, "a list item's number"
    parsed = _readings(digits)
    if not parsed:
        return None, "not a number in any format the check reads"
    word = suffix.strip()
    kind: Kind = "number"
    scale = 0
    if word in ("%", "percent", "Percent", "per cent", "pp") or word.startswith(("percentage point", "point")):
        kind = "percent"
    elif word in ("x", "×", "times", "-fold", "fold"):
        kind = "multiple"
    elif word:
        scale = _SCALES.get(word, 0)
    negative = sign_start < start
    hedge = hedge_before(answer[max(0, sign_start - 20) : sign_start])
    hedged = hedge is not None
    text_start = m.start(1) if m.group(1) else sign_start
    readings = tuple(
        _reading(value.scaleb(scale), _step(value, places, hedged).scaleb(scale), negative) for value, places in parsed
    )
    return (
        Figure(
            answer[text_start:after_at],
            text_start,
            after_at,
            kind,
            readings=readings,
            hedged=hedged,
            hedge=hedge,
            decrease=negative or decrease_beside(answer, text_start, after_at),
        ),
        "",
    )


def _readings(digits: str) -> list[tuple[Decimal, int]]:
    """The values `digits` may mean, with their decimal places (both readings when ambiguous); `9.99e5`
    is 999,000 to the nearest thousand (places -3)."""
    mantissa, _, exponent = digits.lower().partition("e")
    if not exponent:
        return _mantissa_readings(digits)
    negative = exponent[0] in "-−"
    exponent = exponent.lstrip("-+−")
    power = _MAX_POWER if len(exponent) > 3 else min(int(exponent), _MAX_POWER)  # no int() of 5,000 digits
    power = -power if negative else power
    return [(value.scaleb(power), places - power) for value, places in _mantissa_readings(mantissa)]


def _mantissa_readings(digits: str) -> list[tuple[Decimal, int]]:
    seps = [c for c in digits if c in _SEPARATORS]
    if not seps:
        return [(Decimal(digits), 0)]
    kinds = list(dict.fromkeys(seps))
    if len(kinds) == 2:
        decimal = kinds[1]
        if seps.count(decimal) != 1 or digits.rfind(decimal) < max(digits.rfind(k) for k in kinds[:1]):
            return []
        whole, fraction = digits.rsplit(decimal, 1)
        return _grouped(whole, kinds[0], fraction)
    sep = kinds[0]
    if len(seps) > 1 or sep in _SPACE_LIKE:
        return _grouped(digits, sep, "")
    whole, fraction = digits.split(sep)
    as_decimal = _number_of(whole, fraction)
    if len(fraction) == 3 and whole != "0" and len(whole) <= 3:
        as_thousands = _grouped(digits, sep, "")
        return as_thousands + as_decimal if sep == "," else as_decimal + as_thousands
    return as_decimal


def _grouped(whole: str, sep: str, fraction: str) -> list[tuple[Decimal, int]]:
    groups = whole.split(sep)
    if not 1 <= len(groups[0]) <= 3 or any(len(g) != 3 for g in groups[1:]):
        return []
    if any(c in _SEPARATORS for c in fraction):
        return []
    return _number_of("".join(groups), fraction)


def _number_of(whole: str, fraction: str) -> list[tuple[Decimal, int]]:
    try:
        return [(Decimal(f"{whole}.{fraction}" if fraction else whole), len(fraction))]
    except InvalidOperation:
        return []


def _reading(value: Decimal, step: Decimal, negative: bool) -> Reading:
    """Past a float's range a figure stands for infinity with no tolerance: no cell gives it."""
    magnitude = float(value)
    if not math.isfinite(magnitude) or not math.isfinite(float(step)):
        return Reading(value=-math.inf if negative else math.inf, step=0.0)
    return Reading(value=-magnitude if negative else magnitude, step=float(step))


def _step(value: Decimal, places: int, hedged: bool) -> Decimal:
    """The unit of the last digit shown; hedged, of the last non-zero digit of a whole number."""
    if places or not hedged or value == 0:
        return Decimal(1).scaleb(-places)
    digits = "".join(map(str, value.as_tuple().digits))  # Decimal's own digits: no length limit
    zeros = len(digits) - len(digits.rstrip("0"))
    return Decimal(1).scaleb(zeros + int(value.as_tuple().exponent))


def _plain_values(masked: str) -> set[float]:
    values = set()
    for m in _NUMBER.finditer(masked):
        for value, _ in _readings(m.group(3)):
            if math.isfinite(float(value)):
                values.add(float(value))
    return values


def _list_sizes(answer: str) -> set[int]:
    """How many items each Markdown list and table of the answer shows."""
    sizes: set[int] = set()
    items = rows = 0
    for line in [*answer.splitlines(), ""]:
        stripped = line.strip()
        if _LIST_ITEM.match(line + " "):
            items += 1
        elif stripped:
            pass
        if stripped.startswith("|"):
            if set(stripped) - set("|-: "):
                rows += 1
        else:
            if rows > 1:
                sizes.add(rows - 1)  # the header row is no item
            rows = 0
        if not _LIST_ITEM.match(line + " ") and not (stripped and items and line.startswith((" ", "\t"))):
            if items:
                sizes.add(items)
            items = 0
    return sizes


def _plain_not_claim(answer: str, figure: Figure, question_values: set[float], list_sizes: set[int]) -> str:
    text = figure.text.replace(",", "")
    plain = figure.kind == "number" and text.isdigit()
    if figure.text.isdigit() and len(figure.text) == 4 and 1900 <= int(figure.text) <= 2100 and not figure.hedged:
        return "a year"
    if figure.kind != "percent" and any(r.value in question_values for r in figure.readings):
        return "in the question"
    before = answer[max(0, figure.start - 8) : figure.start].lower().rstrip()
    if plain and any(before.endswith(word) for word in _RANKS):
        return "a rank or a limit (top 5)"
    window = answer[max(0, figure.start - 24) : figure.start].lower().split()
    last_word = window[-1] if window else ""
    if plain and last_word in _LABELS:
        return "a name (Paragraph 3, flight 1545)"
    if plain and Decimal(text) in list_sizes:  # no int(): it refuses over 4,300 digits
        return "the count of items the answer lists"
    return ""
