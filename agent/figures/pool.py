"""The cells of the cited results, as the figure check reads them: every numeric cell, the rows
(with the text cells a sentence names them by), whole columns, row counts and what the SQL states."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import NamedTuple

from agent import linear_re
from agent.db import QueryResult
from agent.figures.deadline import Deadline, no_deadline
from agent.figures.names import Label, Sentence, label
from agent.figures.report import CellRef
from agent.figures.sql_literals import literals

_NUMERIC = linear_re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_NUMBER_CHARS = frozenset("0123456789-+.eE")
_MAX_CELLS_PER_CHECK = 5_000
_ALWAYS_RELATED_ROWS = 3
_MAX_RELATED_CELLS = 200  # a sentence naming rows of more cells has no two-cell derivation: they would match by chance


@dataclass(frozen=True)
class Evidence:
    """A query of the run, under its Q id."""

    id: str
    sql: str
    result: QueryResult


class Ref(NamedTuple):
    """Where a cell is, and what ClickHouse printed there: a tuple, as a pool holds one for every cell of
    its results; only the few a report names become `CellRef`s."""

    query_id: str
    row: int | None  # 1-based; None for the WITH TOTALS row
    column: str
    value: str

    def reported(self) -> CellRef:
        return CellRef(query_id=self.query_id, row=self.row, column=self.column, value=self.value)


class Cell(NamedTuple):
    value: float
    ref: Ref


@dataclass(frozen=True)
class _Row:
    cells: list[Cell]
    names: tuple[str, ...]  # its text cells: how a sentence names the row (labels read when first needed)
    always: bool  # a row of a result of at most 3 rows: no sentence needs to name it


@dataclass
class Pool:
    """The numeric cells of some cited results, and what the derivations need of them."""

    cells: list[Cell] = field(default_factory=list)
    rows: list[_Row] = field(default_factory=list)
    columns: list[list[Cell]] = field(default_factory=list)  # whole columns of whole results
    texts: list[Ref] = field(default_factory=list)  # every cell, for dates and times
    row_counts: list[tuple[str, int]] = field(default_factory=list)
    sql_numbers: set[float] = field(default_factory=set)
    sql_dates: set[tuple[int, int, int]] = field(default_factory=set)
    _related: dict[str, list[Cell]] = field(default_factory=dict)
    _labels: list[tuple[Label, ...]] | None = None  # each row's, as names.py reads them
    _days: dict[str, list[Ref]] | None = None

    def on_day(self, month: int, day: int) -> list[Ref]:
        """The cells that start with a date of that month and day (`2013-11-27`, `2013-11-27 17:05:00`),
        in order: indexed once a pool, so each date of an answer is a lookup."""
        if self._days is None:
            self._days = {}
            for ref in self.texts:
                head = ref.value[:10]
                if len(head) == 10:
                    self._days.setdefault(head[4:], []).append(ref)
        return self._days.get(f"-{month:02d}-{day:02d}", [])

    def related(self, sentence: str) -> list[Cell]:
        """The cells two-cell derivations may use for a figure in `sentence`, sorted by value (once a
        sentence: an answer's figures share a few)."""
        if self._labels is None:  # an answer of dates only never needs them
            self._labels = [tuple(map(label, row.names)) for row in self.rows]
        if sentence not in self._related:
            words = Sentence(sentence)
            rows = zip(self.rows, self._labels, strict=True)
            cells = [c for row, labels in rows if row.always or any(map(words.names, labels)) for c in row.cells]
            self._related[sentence] = sorted(cells, key=lambda c: c.value) if len(cells) <= _MAX_RELATED_CELLS else []
        return self._related[sentence]


def pool_of(evidence: Iterable[Evidence], deadline: Deadline | None = None) -> Pool:
    deadline = deadline or no_deadline()
    pool = Pool()
    for item in evidence:
        result = item.result
        rows: list[tuple[int | None, list[str | None]]] = [(i + 1, r) for i, r in enumerate(result.rows)]
        if result.totals is not None:
            rows.append((None, result.totals))
        always = len(result.rows) <= _ALWAYS_RELATED_ROWS and not result.has_more
        columns: list[list[Cell]] = [[] for _ in result.columns]
        for row_number, row in rows:
            deadline.check()
            row_cells, names = [], []
            for index, (name, text) in enumerate(zip(result.columns, row, strict=False)):
                if text is None:
                    continue
                ref = Ref(item.id, row_number, name, text)
                pool.texts.append(ref)
                number = _numeric(text)
                if number is None:
                    if len(text.strip()) >= 2:
                        names.append(text)
                    continue
                if len(pool.cells) >= _MAX_CELLS_PER_CHECK:
                    continue
                cell = Cell(number, ref)
                pool.cells.append(cell)
                row_cells.append(cell)
                if row_number is not None:
                    columns[index].append(cell)
            pool.rows.append(_Row(row_cells, tuple(names), always))
        if not result.has_more:
            pool.columns.extend(c for c in columns if len(c) > 1)
            pool.row_counts.append((item.id, result.row_count))
        for sql in {item.sql, result.ran_sql or item.sql}:
            stated = literals(sql)
            pool.sql_numbers.update(stated.numbers)
            pool.sql_dates.update(stated.dates)
    return pool


def _numeric(text: str) -> float | None:
    if text.isascii() and text.isdigit():  # most cells: a count
        value = float(text)
        return value if math.isfinite(value) else None
    if text.isascii() and (not _NUMBER_CHARS.issuperset(text) or "-" in text[1:].replace("e-", "").replace("E-", "")):
        return None  # a date, a word: cheaper told apart here than by the pattern, which cannot match them
    if not _NUMERIC.fullmatch(text):
        return None
    try:
        value = float(Decimal(text))
    except (InvalidOperation, ValueError):
        return None
    return value if math.isfinite(value) else None
