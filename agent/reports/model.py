"""A report: the answer to a question that is more than one query, written by the model from the queries
its run executed and their results only, with every figure checked against the cells it cites.

This is the report's one shape, what the pipeline makes (agent/pipeline/reporting.py), the kit stores
(chats/reports.py), the renderers read (agent/reports/markdown.py, pdf.py) and the adapters show. It
imports nothing of the Runner (agent/runner.py carries it in `RunResult.report`), so the contract stays
one way.

Sections, in the order a reader meets them: the answer in a few sentences (`summary`); the findings,
each with its `[Qn]` citations and, where it helps, a chart (`C1`) drawn from a cited query; how this
was found (`method`: the queries, in words); caveats and what remains uncertain; what could not be
answered and why (`unanswered`). A partial report (a budget ran out) also says what remains.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from agent.charts import Chart
from agent.figures import FigureReport
from agent.receipts import Receipt

if TYPE_CHECKING:
    from agent.config import Settings


class ReportOutcome(StrEnum):
    COMPLETE = "complete"  # the question was answered from the data
    PARTIAL = "partial"  # a budget ran out: what is done, what remains; Resume goes on
    CANNOT_ANSWER = "cannot_answer"  # the data is not there: what is missing (never a confident report from nothing)


LIMITS = ("steps", "tool_calls", "queries", "minutes", "tokens", "cost")


class ReportBudget(BaseModel):
    """What one report run may spend (Settings' AGENT_REPORT_*; None: no limit of that kind). A Resume
    grants one more budget of the same size (`ReportRequest.grants`)."""

    steps: int = 16  # model round trips
    tool_calls: int = 24
    queries: int = 15  # queries executed by the engine (a reused result is free)
    minutes: float = 10.0
    tokens: int | None = 500_000  # input, output and cache tokens of every model call
    cost_usd: float | None = 2.0  # the receipt's estimate (agent/pricing.yaml)

    @classmethod
    def of(cls, settings: Settings) -> ReportBudget:
        """The team's defaults (AGENT_REPORT_*)."""
        return cls(
            steps=settings.agent_report_max_steps,
            tool_calls=settings.agent_report_max_tool_calls,
            queries=settings.agent_report_max_queries,
            minutes=settings.agent_report_max_minutes,
            tokens=settings.agent_report_max_tokens,
            cost_usd=settings.agent_report_max_cost_usd,
        )


class ReportUsage(BaseModel):
    """What the report has spent so far, over every run that built it (`seconds`: the last run's)."""

    steps: int = 0
    tool_calls: int = 0
    queries: int = 0
    seconds: float = 0.0
    tokens: int = 0
    cost_usd: float = 0.0


class ReportRequest(BaseModel):
    """What an adapter hands `Runner.run(report=...)` to ask for a report rather than an answer. Asked for
    explicitly only (a `report:` message, a Dig deeper button, `agent report`, an eval case): never
    guessed from the question."""

    budget: ReportBudget = Field(default_factory=ReportBudget)
    report_id: str = ""  # '' for a new report (the run id names it); a Resume names the report it continues
    # How many budgets the report has been given: 1, and one more per Resume. Its steps, tool calls,
    # queries, tokens and cost are counted over the whole report (a resumed run's checkpoint carries them),
    # against `grants` times the budget; minutes are each run's own.
    grants: int = Field(default=1, ge=1)
    runs: list[str] = Field(default_factory=list)  # the runs that wrote it before this one


class FigureMark(BaseModel):
    """A figure of a section that the check could not verify against its cited cells, marked where it
    stands: `start`/`end` are offsets in that section's (or finding's) text."""

    text: str
    start: int
    end: int
    reason: str = ""


class Finding(BaseModel):
    text: str  # Markdown, with its [Qn] citations
    citations: list[str] = Field(default_factory=list)  # the Q ids it cites, in order of first mention
    chart: str | None = None  # the id (C1, ...) of a chart of the run shown with it
    marks: list[FigureMark] = Field(default_factory=list)  # its figures still unverified


class ReportQuery(BaseModel):
    """One query the report rests on, as a reader of the report (and its appendix) sees it."""

    id: str  # Q1, Q2, ... as the report cites it
    question: str
    sql: str
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)  # a short JSON preview
    row_count: int = 0
    error: str | None = None
    reused_from: str | None = None


class Report(BaseModel):
    id: str  # the report's id: its first run's id (a Resume keeps it)
    question: str
    outcome: ReportOutcome
    summary: str = ""
    findings: list[Finding] = Field(default_factory=list)
    method: str = ""  # how this was found
    caveats: str = ""  # caveats, and what remains uncertain
    unanswered: str = ""  # what could not be answered, and why (for cannot_answer: what data is missing)
    remaining: str = ""  # partial only: what is left to do
    stopped_by: str | None = None  # partial only: which limit of LIMITS ran out, or "cancelled", "error"
    queries: list[ReportQuery] = Field(default_factory=list)
    charts: list[Chart] = Field(default_factory=list)
    figures: FigureReport | None = None  # the whole report's figures, checked against their cited cells
    marks: dict[str, list[FigureMark]] = Field(default_factory=dict)  # unverified figures, by section name
    # a chart's title is the model's text too: its figures checked against the chart's query, by chart id
    caption_marks: dict[str, list[FigureMark]] = Field(default_factory=dict)
    receipt: Receipt | None = None
    budget: ReportBudget = Field(default_factory=ReportBudget)
    used: ReportUsage = Field(default_factory=ReportUsage)
    runs: list[str] = Field(default_factory=list)  # the run ids that built it, first to last (a Resume adds one)
    policy: str | None = None  # the access policy its queries ran under

    @property
    def resumable(self) -> bool:
        return self.outcome is ReportOutcome.PARTIAL

    def chart(self, chart_id: str | None) -> Chart | None:
        return next((c for c in self.charts if c.id == chart_id), None) if chart_id else None

    def status(self) -> ReportStatus:
        return ReportStatus(
            id=self.id,
            outcome=self.outcome,
            stopped_by=self.stopped_by,
            findings=len(self.findings),
            unverified=self.figures.unverified if self.figures else 0,
        )


class ReportStatus(BaseModel):
    """How a report ended, small enough for the `done` event (`FinalAnswer.report`): an adapter reads the
    whole report from the kit's store (chats/reports.py) by `id` once `done` is published."""

    id: str
    outcome: ReportOutcome
    stopped_by: str | None = None
    findings: int = 0
    unverified: int = 0  # figures still unverified after the correction round (marked where shown)
