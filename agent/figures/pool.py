"""The cells of the cited results, as the figure check reads them: every numeric cell, the rows
(with the text cells a sentence names them by), whole columns, row counts and what the SQL states."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from agent import linear_re
from agent.db import QueryResult
from agent.figures.deadline import Deadline, no_deadline
from agent.figures.names import Label, Sentence, label
from agent.figures.report import CellRef
from agent.figures.sql_literals import literals

_NUMERIC = linear_re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_MAX_CELLS_PER_CHECK = 5_000
_ALWAYS_RELATED_ROWS = 3
_MAX_RELATED_CELLS = 200  # a sentence naming rows of more cells has no two-cell derivation: they would match by chance


@dataclass(frozen=True)
class Evidence:
    """A query of the run, under its Q id."""

    id: str
    sql: str
    result: QueryResult


@dataclass(frozen=True)
class Cell:
    value: float
    ref: CellRef


@dataclass(frozen=True)
class _Row:
    cells: list[Cell]
    labels: tuple[Label, ...]  # its text cells: how a sentence names the row (names.py)
    always: bool  # a row of a result of at most 3 rows: no sentence needs to name it


@dataclass
class Pool:
    """The numeric cells of some cited results, and what the derivations need of them."""

    cells: list[Cell] = field(default_factory=list)
    rows: list[_Row] = field(default_factory=list)
    columns: list[list[Cell]] = field(default_factory=list)  # whole columns of whole results
    texts: list[CellRef] = field(default_factory=list)  # every cell, for dates and times
    row_counts: list[tuple[str, int]] = field(default_factory=list)
    sql_numbers: set[float] = field(default_factory=set)
    sql_dates: set[tuple[int, int, int]] = field(default_factory=set)
    _related: dict[str, list[Cell]] = field(default_factory=dict)

    def related(self, sentence: str) -> list[Cell]:
        """The cells two-cell derivations may use for a figure in `sentence`, sorted by value (once a
        sentence: an answer's figures share a few)."""
        if sentence not in self._related:
            words = Sentence(sentence)
            cells = [c for row in self.rows if row.always or any(map(words.names, row.labels)) for c in row.cells]
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
            row_cells, labels = [], []
            for index, (name, text) in enumerate(zip(result.columns, row, strict=False)):
                if text is None:
                    continue
                ref = CellRef(query_id=item.id, row=row_number, column=name, value=text)
                pool.texts.append(ref)
                number = _numeric(text)
                if number is None:
                    if len(text.strip()) >= 2:
                        labels.append(label(text))
                    continue
                if len(pool.cells) >= _MAX_CELLS_PER_CHECK:
                    continue
                cell = Cell(number, ref)
                pool.cells.append(cell)
                row_cells.append(cell)
                if row_number is not None:
                    columns[index].append(cell)
            pool.rows.append(_Row(row_cells, tuple(labels), always))
        if not result.has_more:
            pool.columns.extend(c for c in columns if len(c) > 1)
            pool.row_counts.append((item.id, result.row_count))
        for sql in {item.sql, result.ran_sql or item.sql}:
            stated = literals(sql)
            pool.sql_numbers.update(stated.numbers)
            pool.sql_dates.update(stated.dates)
    return pool


def _numeric(text: str) -> float | None:
    if not _NUMERIC.fullmatch(text):
        return None
    try:
        value = float(Decimal(text))
    except (InvalidOperation, ValueError):
        return None
    return value if math.isfinite(value) else None
