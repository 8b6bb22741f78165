"""One run as its events tell it so far: the one fold of a run's events, which every adapter reads.

Slack's plan, progress and outcome, the CLI's printer and the stored query row each used to keep
their own per-query state, built from the same events in their own words. A `RunView` applies each
event once, and they all read it. Its names are the wire's, the ones the web's JavaScript reads
(web/static/app.js: `query_id`, `row_count`, `has_more`, `elapsed_ms`, ...): a query as the browser
sees it, the terminal prints it, Slack shows it and the store keeps it is one shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.charts import Chart
from agent.runner import (
    AnswerEvent,
    ChartEvent,
    ErrorEvent,
    ExecutingEvent,
    FinalAnswer,
    FinishedEvent,
    FollowupsEvent,
    ResultEvent,
    RunResult,
    StartedEvent,
    StepEvent,
    WireEvent,
)

QueryState = Literal["executing", "result", "error"]  # running; answered with rows; failed


@dataclass
class QueryView:
    """One query of the run: its `executing` event, then its `result` event's fields once it has one."""

    query_id: str
    question: str
    sql: str
    state: QueryState = "executing"
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)  # the result event's JSON preview
    row_count: int = 0
    has_more: bool = False
    error: str | None = None
    hint: str | None = None
    elapsed_ms: int = 0
    reused_from: str | None = None
    error_code: int | None = None

    def take(self, result: ResultEvent) -> None:
        self.state = "error" if result.error else "result"
        self.columns, self.rows, self.row_count = result.columns, result.rows, result.row_count
        self.has_more, self.error, self.hint = result.has_more, result.error, result.hint
        self.elapsed_ms, self.reused_from, self.error_code = result.elapsed_ms, result.reused_from, result.error_code

    @property
    def running(self) -> bool:
        return self.state == "executing"

    def summary(self) -> dict[str, Any]:
        """As `agent ask --json` lists a query (RunResult.summary's keys)."""
        keys = ("question", "sql", "columns", "rows", "row_count", "has_more", "error")
        return {"id": self.query_id, **{key: getattr(self, key) for key in keys}}


@dataclass
class RunView:
    """A run so far. `apply` takes each event in order; a replayed log gives the same view as the live one."""

    question: str = ""
    queries: dict[str, QueryView] = field(default_factory=dict)  # by Q id, in the order they started
    charts: list[Chart] = field(default_factory=list)
    answer: str = ""  # as streamed; `done` puts the final word in
    followups: list[str] = field(default_factory=list)
    error: str | None = None  # the last `error` event's message
    result: FinalAnswer | None = None  # `done`'s: None while running, and when the run failed on the server
    done: bool = False
    steps: dict[int, StepEvent] = field(default_factory=dict)  # a report's live plan: each step as it last stood

    def apply(self, event: WireEvent) -> None:
        match event:
            case StartedEvent(question=question):
                self.question = question
            case ExecutingEvent(query_id=query_id, question=question, sql=sql):
                self.queries[query_id] = QueryView(query_id, question, sql)
            case ResultEvent(query_id=query_id) if query := self.queries.get(query_id):
                query.take(event)
            case ChartEvent(chart=chart):
                self.charts.append(chart)
            case AnswerEvent(text=text, restart=restart):
                self.answer = "" if restart else self.answer + text
            case FollowupsEvent(questions=questions):
                self.followups = list(questions)
            case ErrorEvent(message=message):
                self.error = message
            case StepEvent(number=number):
                self.steps[number] = event
            case FinishedEvent(result=result):
                self.done, self.result = True, result
                self.answer = result.answer if result is not None else self.answer

    def apply_all(self, events: Iterable[WireEvent]) -> RunView:
        for event in events:
            self.apply(event)
        return self

    @classmethod
    def of_result(cls, result: RunResult, *, max_bytes: int) -> RunView:
        """A run known only by its result (one driven directly, or a turn being stored): its queries as their
        events would have told them, each result's preview within `max_bytes`."""
        events: list[WireEvent] = [StartedEvent(question=result.question)]
        for query in result.queries:
            events.append(ExecutingEvent(query_id=query.id, question=query.question, sql=query.sql))
            events.append(ResultEvent.of(query, max_bytes=max_bytes))
        return cls().apply_all(events)

    @property
    def failed(self) -> list[QueryView]:
        return [query for query in self.queries.values() if query.state == "error"]
