"""What the figure check found, as adapters, the store and `agent ask --json` see it."""

from __future__ import annotations

from pydantic import BaseModel, Field, computed_field

MAX_FIGURES = 100  # checked and reported per answer; an answer with more keeps the first
MAX_CELLS = 3  # cells shown per figure (a derivation names its operands)


class CellRef(BaseModel):
    """One cell of a cited query, as ClickHouse printed it."""

    query_id: str
    row: int | None  # 1-based; None for the WITH TOTALS row
    column: str
    value: str


class FigureCheck(BaseModel):
    """One figure of the answer. `start`/`end` are offsets in the answer's text; `how` names the
    derivation that verified it (agent/figures/verify.py lists them), `reason` says why it did not.
    `checked_against`: the queries whose results were searched, empty when none it cites had one (the
    figure could not be checked, rather than checked and not matched); None in reports stored before."""

    text: str
    start: int
    end: int
    citations: list[str] = Field(default_factory=list)
    verified: bool
    how: str | None = None
    cells: list[CellRef] = Field(default_factory=list)
    reason: str | None = None
    checked_against: list[str] | None = None


class FigureReport(BaseModel):
    figures: list[FigureCheck] = Field(default_factory=list)
    not_claims: int = 0  # numbers told apart as not claims (years, Q numbers, list counts, ...)
    unchecked: str | None = None  # why the answer's figures were not checked at all (out of time, or the check failed)
    partly: str | None = None  # why some were not: past the first MAX_FIGURES figures, or past the text checked
    corrected: bool = False  # the answer went through the correction round
    unverified_before_correction: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def checked(self) -> int:
        return len(self.figures)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verified(self) -> int:
        return sum(f.verified for f in self.figures)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def unverified(self) -> int:
        return self.checked - self.verified

    def failures(self) -> list[FigureCheck]:
        return [f for f in self.figures if not f.verified]
