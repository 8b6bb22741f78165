"""A report run's own part of the loop (`Runner.run(report=...)`): the same single iterative loop as an
answer, which calls these hooks when `RunState.report` is set, and nothing else of a report's lives in it.

- Its request: the question goes with prompts/report/request.md (headings, budget), after the cached
  prefix, so the prefix an answer caches is the report's too.
- Its budget (agent/reports/model.py `ReportBudget`): steps are the loop's rounds, queries its engine
  executions (`RunState.max_queries`), and before every model call the tool calls, minutes, tokens and cost
  are checked, with the per-question budgets (AGENT_QUESTION_MAX_TOKENS, _ROWS_READ) over each run: whichever
  comes first. Past any of them one call with no tools writes the report from what was gathered, with what
  remains (prompts/report/partial.md); past the tokens or the cost, no call: the program says what was
  gathered. A report spends at most its budget plus one call, as a question does.
- Its live plan: a `StepEvent` as each step starts its tools and when they are done.
- Its report: the model's text read back into sections (agent/reports/sections.py); the figure check has
  run over the whole of it, with its one correction round, and what still fails is marked in the section
  that holds it, and each chart's title (its caption) is checked against the chart's query. A finding that
  cites no query that returned a result is left out (evidence only); a report that no limit stopped is
  complete only when a finding cites a query that returned rows (or a figure verified), else it cannot answer.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from agent.charts import is_date_part
from agent.db import QueryResult
from agent.figures import Evidence, FigureReport
from agent.llm import ModelTurn
from agent.pipeline.question_budget import Overspent, QuestionBudget
from agent.pipeline.state import RunState
from agent.prompts import PromptLibrary
from agent.reports.model import (
    FigureMark,
    Finding,
    Report,
    ReportOutcome,
    ReportQuery,
    ReportRequest,
    ReportUsage,
)
from agent.reports.sections import Span, WrittenReport, read_report
from agent.runner import AnswerEvent, ExecutedQuery, Outcome, RunResult, StepEvent

if TYPE_CHECKING:
    from agent.pipeline.figures import FigureReview

PREVIEW_ROWS = 5  # of each query, in the stored report (the query's page has all of it)
TITLE_CHARS = 160


class ReportRun:
    def __init__(self, request: ReportRequest, prompts: PromptLibrary, question: QuestionBudget | None = None) -> None:
        self.request, self.budget, self._prompts = request, request.budget, prompts
        # the per-question budgets (AGENT_QUESTION_MAX_*) hold for each run of a report too, whichever comes first
        self._question = question or QuestionBudget()
        self._question_from = (0, 0)  # tokens and rows read before this run (a Resume's checkpoint)
        self.grants = request.grants
        self.stopped_by: str | None = None
        self._clock = time.perf_counter()  # minutes are each run's own
        self._tool_calls = 0  # over the whole report: a resumed run counts its checkpoint's first
        self._step_title = ""
        self._step_queries_from = 0
        self._refused_before = 0  # queries refused for the budget before this run
        self._caption_marks: dict[str, list[FigureMark]] = {}

    # --- the loop's hooks ---

    def attach(self, state: RunState, messages: Sequence[dict[str, Any]], rounds_done: int) -> None:
        """The run begins, or goes on from a checkpoint (its state restored, `rounds_done` rounds made):
        what the report has spent is counted from what the state and its messages hold."""
        self._clock = time.perf_counter()
        self._tool_calls = sum(
            1
            for message in messages
            if message.get("role") == "assistant" and isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_use"
        )
        state.max_queries = self.grants * self.budget.queries
        self._refused_before = state.run_metrics.guard_interventions.get("query_cap", 0)
        self._question_from = (_tokens(state), _rows_read(state))

    @property
    def max_rounds(self) -> int:
        return self.grants * self.budget.steps

    def request_text(self) -> str:
        return self._prompts.render("report/request.md", budget=self.budget)

    def penultimate_text(self) -> str:
        return self._prompts.render("report/penultimate.md")

    def tokens_spent(self, state: RunState) -> bool:
        """No model call may be made (the synthesis neither): the tokens or the cost are spent."""
        over = self._over(state)
        return over is not None and over.kind in ("tokens", "cost")

    def spent(self, state: RunState) -> Overspent | None:
        """The first limit the report has reached; None while none is. Checked before every model call."""
        over = self._over(state)
        if over is not None:
            self.stopped_by = over.kind
            state.metrics.budget_stops.labels(f"report_{over.kind}").inc()
        return over

    def _over(self, state: RunState) -> Overspent | None:
        used, budget, times = self.used(state), self.budget, self.grants
        # Its queries are spent when one was refused for the budget: a report that ran exactly its budget and
        # then writes itself is complete.
        refused = state.run_metrics.guard_interventions.get("query_cap", 0) > self._refused_before
        checks: list[tuple[str, float, float | None]] = [
            ("tool_calls", used.tool_calls, times * budget.tool_calls),
            ("queries", used.queries, times * budget.queries if refused else None),
            ("minutes", used.seconds / 60, budget.minutes),
            ("tokens", used.tokens, None if budget.tokens is None else times * budget.tokens),
            ("cost", used.cost_usd, None if budget.cost_usd is None else times * budget.cost_usd),
        ]
        tokens_before, rows_before = self._question_from
        checks += [
            ("tokens", used.tokens - tokens_before, self._question.max_tokens),
            ("rows_read", _rows_read(state) - rows_before, self._question.max_rows_read),
        ]
        for kind, spent, limit in checks:
            if limit is not None and spent >= limit:
                return Overspent(kind, spent, limit)
        return None

    async def step_started(self, state: RunState, calls: Sequence[dict[str, Any]], turn: ModelTurn) -> None:
        self._tool_calls += len(calls)
        self._step_queries_from = state.query_ids_taken
        self._step_title = _title(calls, turn.text)
        await state.emit(self._step(state, "running"))

    async def step_done(self, state: RunState) -> None:
        await state.emit(self._step(state, "done"))

    def _step(self, state: RunState, step_state: str) -> StepEvent:
        ran = [f"Q{n}" for n in range(self._step_queries_from + 1, state.query_ids_taken + 1)]
        return StepEvent(
            number=state.run_metrics.rounds,  # the model round that asked for it, counted over the report
            title=self._step_title,
            state="running" if step_state == "running" else "done",
            queries=ran if step_state == "done" else [],
            used=self.used(state),
            budget=self.budget,
        )

    async def synthesize(self, state: RunState, write: Callable[[str], Awaitable[ModelTurn]], gathered: str) -> None:
        """At a limit: one call with no tools writes the report from what was gathered (`write` makes it
        with the prompt added), or, past the tokens or the cost, the program says what was gathered."""
        state.outcome = Outcome.CAPPED
        self.stopped_by = self.stopped_by or "steps"
        over = state.budget_spent if isinstance(state.budget_spent, Overspent) else None
        if over is not None and over.kind in ("tokens", "cost"):
            state.answer = self.stopped_text(f"it reached its budget of {_limit_words(over)}", gathered)
            await state.emit(AnswerEvent(text=state.answer, restart=bool(state.streamed_text)))
            return
        kind, spent, allowed = (
            (over.kind, over.spent, over.limit) if over else ("steps", state.run_metrics.rounds, self.max_rounds)
        )
        limit = kind.replace("_", " ")
        prompt = self._prompts.render("report/partial.md", limit=limit, spent=_n(spent), allowed=_n(allowed))
        turn = await write(prompt)
        state.answer = turn.text or self.stopped_text("the model wrote nothing at its last step", gathered)

    def stopped_text(self, why: str, gathered: str) -> str:
        return self._prompts.render("report/stopped.md", why=why, gathered=gathered)

    async def check_captions(self, state: RunState, review: FigureReview) -> None:
        """Each chart's title, the model's text shown as a finding's caption: its figures checked against the
        chart's query, what fails marked (the title is shown as written)."""
        queries = {q.id: q for q in state.queries}
        for chart in state.charts:
            query = queries.get(chart.query_id)
            if query is None or not chart.title.strip():
                continue
            evidence = [Evidence(id=query.id, sql=query.sql, result=_without_date_parts(query.result))]
            found = await review.check_text(f"{chart.title} [{query.id}]", state.question, evidence)
            if marks := [m for m in _unverified(found) if m.end <= len(chart.title)]:
                self._caption_marks[chart.id] = marks

    # --- the report ---

    def used(self, state: RunState) -> ReportUsage:
        return ReportUsage(
            steps=state.run_metrics.rounds,
            tool_calls=self._tool_calls,
            queries=state.executions_claimed,
            seconds=round(time.perf_counter() - self._clock, 3),
            tokens=_tokens(state),
            cost_usd=round(_cost(state), 6),
        )

    def build(self, state: RunState, result: RunResult) -> Report:
        """The run's report, from the text it ended with, its queries and the figure check."""
        if result.outcome is Outcome.CANCELLED:
            self.stopped_by = "cancelled"
        elif result.outcome is Outcome.ERROR:
            self.stopped_by = "error"
        text = state.answer[: len(state.answer) - len(state.note)] if state.note else state.answer
        written = read_report(text)
        answered = {q.id for q in state.queries if q.result.ok}
        charts = {chart.id for chart in state.charts}
        marks = _unverified(state.figures)
        findings = [
            Finding(
                text=f.span.text,
                citations=f.citations,
                chart=f.chart if f.chart in charts else None,
                marks=_marks_in(f.span, marks),
            )
            for f in written.findings
            if answered.intersection(f.citations)
        ]
        outcome = (
            ReportOutcome.PARTIAL
            if self.stopped_by
            else (ReportOutcome.COMPLETE if _rests_on_evidence(findings, state) else ReportOutcome.CANNOT_ANSWER)
        )
        sections = self._sections(written, outcome, len(written.findings) - len(findings), state, result)
        return Report(
            id=self.request.report_id or state.run_id,
            question=state.question,
            outcome=outcome,
            findings=findings,
            stopped_by=self.stopped_by if outcome is ReportOutcome.PARTIAL else None,
            queries=[_query(q) for q in state.queries],
            charts=state.charts,
            figures=state.figures,
            receipt=result.receipt,
            budget=self.budget,
            used=self.used(state),
            runs=[*self.request.runs, state.run_id],
            policy=result.policy,
            marks={name: found for name in sections if (found := _marks_in(written.sections.get(name), marks))},
            caption_marks=self._caption_marks,
            **sections,
        )

    def _sections(
        self, written: WrittenReport, outcome: ReportOutcome, dropped: int, state: RunState, result: RunResult
    ) -> dict[str, str]:
        sections = {name: written.text_of(name) for name in ("summary", "method", "caveats", "unanswered")}
        if dropped:
            note = f"{dropped} finding(s) citing no query with a result were left out (evidence only)."
            sections["caveats"] = f"{sections['caveats']}\n\n{note}".strip()
        if outcome is ReportOutcome.CANNOT_ANSWER and not sections["unanswered"]:
            sections["unanswered"] = "None of the queries returned what the question needs."
        if outcome is ReportOutcome.PARTIAL:
            done = sum(1 for q in state.queries if q.result.ok and not q.reused_from)
            sections["remaining"] = written.text_of("remaining") or (
                f"It stopped at its {(self.stopped_by or 'steps').replace('_', ' ')} limit; Resume goes on from the "
                f"{done} queries that returned results, without running them again."
            )
        return sections


def _without_date_parts(result: QueryResult) -> QueryResult:
    """A result without its date-part columns (a month's number is a category on an axis, not a measure): a
    caption's `900%` must not pass as month 9 read as a fraction."""
    keep = [
        i
        for i, (name, kind) in enumerate(zip(result.columns, result.types, strict=False))
        if not is_date_part(name, kind)
    ]
    if len(keep) == len(result.columns):
        return result
    return result.model_copy(
        update={
            "columns": [result.columns[i] for i in keep],
            "types": [result.types[i] for i in keep],
            "rows": [[row[i] for i in keep] for row in result.rows],
            "totals": None if result.totals is None else [result.totals[i] for i in keep],
        }
    )


def _rests_on_evidence(findings: Sequence[Finding], state: RunState) -> bool:
    """Complete needs something to stand on: a finding citing a query that returned rows, or a verified
    figure. Findings resting only on empty results are kept (an empty result says something) but are no
    confident answer."""
    with_rows = {q.id for q in state.queries if q.result.ok and q.result.row_count > 0}
    verified = state.figures is not None and state.figures.verified > 0
    return any(with_rows.intersection(f.citations) for f in findings) or (bool(findings) and verified)


def _title(calls: Sequence[dict[str, Any]], narration: str) -> str:
    """A step in words: its reasoning, else the questions of its queries, else what its tools do."""
    for call in calls:
        content = call["input"].get("content") if call["name"] == "think" and isinstance(call["input"], dict) else None
        if isinstance(content, str) and content.strip():
            return _short(content)
    questions = [
        q["question"]
        for call in calls
        if call["name"] == "execute_sql" and isinstance(call["input"], dict)
        for q in call["input"].get("queries") or []
        if isinstance(q, dict) and isinstance(q.get("question"), str)
    ]
    if questions:
        return _short("; ".join(questions))
    if narration.strip():
        return _short(narration)
    names = {"chart": "Drawing a chart", "lookup_schema": "Looking up the schema"}
    return next((names[c["name"]] for c in calls if c["name"] in names), "Working")


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"


def _unverified(figures: FigureReport | None) -> list[FigureMark]:
    if figures is None:
        return []
    return [FigureMark(text=f.text, start=f.start, end=f.end, reason=f.reason or "") for f in figures.failures()]


def _marks_in(span: Span | None, marks: list[FigureMark]) -> list[FigureMark]:
    """The marks inside `span`, as offsets in its own text (found again by their text where a finding's
    chart name was taken out before them)."""
    if span is None:
        return []
    found = []
    for mark in marks:
        if span.start <= mark.start < span.end:
            at = span.text.find(mark.text, max(0, mark.start - span.start - 40))
            if at >= 0:
                found.append(mark.model_copy(update={"start": at, "end": at + len(mark.text)}))
    return found


def _query(query: ExecutedQuery) -> ReportQuery:
    result = query.result
    return ReportQuery(
        id=query.id,
        question=query.question,
        sql=query.sql,
        columns=result.columns,
        rows=result.json_rows(PREVIEW_ROWS),
        row_count=result.row_count,
        error=result.error,
        reused_from=query.reused_from,
    )


def _tokens(state: RunState) -> int:
    return sum(usage.total for _, usage in state.model_usage.values())


def _rows_read(state: RunState) -> int:
    return sum(q.result.rows_read or 0 for q in state.queries if not q.reused_from)


def _cost(state: RunState) -> float:
    if state.prices is None:
        return 0.0
    priced = (state.prices.cost(model, _by_kind(usage)) for model, (_, usage) in state.model_usage.items())
    return sum(cost for cost in priced if cost is not None)


def _by_kind(usage: Any) -> dict[str, int]:
    return {
        "input": usage.input_tokens,
        "output": usage.output_tokens,
        "cache_read": usage.cache_read_tokens,
        "cache_creation": usage.cache_creation_tokens,
    }


def _limit_words(over: Overspent) -> str:
    if over.kind == "cost":
        return f"${over.limit:,.2f} of estimated cost"
    return f"{_n(over.limit)} {over.kind.replace('_', ' ')}"


def _n(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
