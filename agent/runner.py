"""The seam between adapters (Slack, web, CLI, evals) and the pipeline.

An adapter calls `Runner.run(question, history=..., platform=..., on_event=...)`, receives typed
progress events as they happen, and gets a `RunResult` back: the one account of how the run ended
(the run registry stores it, then tells readers with the one `done` event). Cancelling the awaiting task stops the model
call and kills running queries; the run then returns a partial result marked cancelled.

A run can be made durable: with `checkpoint=`, the runner hands a `Checkpoint` (everything the run has
gathered, as JSON-ready data) to that callable when it starts and after every completed round; a later
`run(..., resume=that_checkpoint)`, in this process or another, goes on at the next round without running
again any query it holds. Its result and receipt count the times it was resumed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    field_validator,
    model_serializer,
    model_validator,
)

from agent.access.policy import Policy
from agent.charts import Chart
from agent.checkpoint_form import (
    CheckpointPart,
    fold,
    has_references,
    reused_once,
    reused_restored,
    with_references,
    without_references,
)
from agent.db import QueryResult, format_for_model
from agent.figures import FigureReport
from agent.limits import json_size
from agent.receipts import Receipt
from agent.reports.model import Report, ReportBudget, ReportRequest, ReportStatus, ReportUsage

Platform = Literal["slack", "web", "cli"]
Interface = Literal["slack", "web", "cli", "eval"]
PREVIEW_ROWS = 20
TURN_PREVIEW_ROWS = 5


class Classification(StrEnum):
    DATA_ANALYSIS = "data_analysis"
    CONVERSATIONAL = "conversational"
    CLARIFICATION = "clarification"  # asked one question back instead of guessing; the next message answers it


class Outcome(StrEnum):
    ANSWERED = "answered"
    CAPPED = "capped"  # answered by the synthesis call at the round cap
    NO_DATA = "no_data"  # the citation guard gave up
    CANCELLED = "cancelled"
    ERROR = "error"


class ExecutedQuery(BaseModel):
    id: str  # Q1, Q2, ... across the whole run
    question: str
    sql: str
    result: QueryResult
    reused_from: str | None = None  # set when identical SQL already ran in this run

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "sql": self.sql,
            "columns": self.result.columns,
            "rows": self.result.json_rows(),
            "row_count": self.result.row_count,
            "has_more": self.result.has_more,
            "error": self.result.error,
        }


class RunMetrics(BaseModel):
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    think_calls: int = 0
    sql_queries: int = 0
    sql_errors: int = 0
    rounds: int = 0
    hit_cap: bool = False
    total_ms: int = 0
    llm_ms: int = 0
    sql_ms: int = 0
    guard_interventions: dict[str, int] = Field(default_factory=dict)
    fallbacks: int = 0  # times the run moved on to the next model in its list
    figure_check_ms: float = 0.0  # time spent checking figures (agent/figures), correction round included


class RunResult(BaseModel):
    question: str
    answer: str = ""
    classification: Classification = Classification.CONVERSATIONAL
    outcome: Outcome = Outcome.ANSWERED
    thinking: list[str] = Field(default_factory=list)
    queries: list[ExecutedQuery] = Field(default_factory=list)
    followups: list[str] = Field(default_factory=list)
    charts: list[Chart] = Field(default_factory=list)
    metrics: RunMetrics = Field(default_factory=RunMetrics)
    cancelled: bool = False
    error: str | None = None
    model: str = ""  # `provider:name` of the model that answered (after any fallback)
    figures: FigureReport | None = None  # the final answer's figures checked against its queries
    receipt: Receipt | None = None
    policy: str | None = None  # the name of the policy its queries ran under (None: no policy, all of the scope)
    report: Report | None = None  # a report run's report (Runner.run(report=...)); None for an answer
    resumed: int = 0  # times the run went on from a checkpoint (another host took it over)
    # The API messages of this turn (question to answer), so the next question can carry it whole.
    # Internal: left out of serialised results and events.
    transcript: list[dict[str, Any]] = Field(default_factory=list, repr=False, exclude=True)

    def to_turn(self) -> Turn:
        queries = [TurnQuery.of(q) for q in self.queries]
        return Turn(question=self.question, answer=self.answer, queries=queries, transcript=self.transcript)

    def summary(self) -> dict[str, Any]:
        """The JSON shape of `agent ask --json`."""
        return {
            "question": self.question,
            "answer": self.answer,
            "classification": self.classification.value,
            "queries": [q.summary() for q in self.queries],
            "followups": self.followups,
            "charts": [chart.summary() for chart in self.charts],
            "model": self.model,
            "figures": self.figures.model_dump() if self.figures else None,
            "receipt": self.receipt.model_dump() if self.receipt else None,
            "metrics": self.metrics.model_dump(),
            **({"report": self.report.model_dump(mode="json")} if self.report is not None else {}),
        }


class TurnQuery(BaseModel):
    """What a later question needs of an earlier query: not its whole result."""

    id: str
    question: str
    sql: str
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)  # a small JSON preview
    row_count: int = 0
    error: str | None = None

    @classmethod
    def of(cls, query: ExecutedQuery) -> TurnQuery:
        result = query.result
        return cls(
            id=query.id,
            question=query.question,
            sql=query.sql,
            columns=result.columns,
            rows=result.json_rows(TURN_PREVIEW_ROWS),
            row_count=result.row_count,
            error=result.error,
        )


class Turn(BaseModel):
    """One earlier question and what came of it, as adapters keep it (light: no whole results)."""

    question: str
    answer: str
    queries: list[TurnQuery] = Field(default_factory=list)
    transcript: list[dict[str, Any]] = Field(default_factory=list, repr=False, exclude=True)

    @field_validator("queries", mode="before")
    @classmethod
    def _light(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [TurnQuery.of(q) if isinstance(q, ExecutedQuery) else q for q in value]
        return value


# --- events ---


class _Event(BaseModel):
    def wire(self) -> dict[str, Any]:
        """The event's data as it goes on the wire (its type is the name it goes under)."""
        return self.model_dump(mode="json", exclude={"type"})


class ThinkingEvent(_Event):
    type: Literal["thinking"] = "thinking"
    text: str


class ExecutingEvent(_Event):
    type: Literal["executing"] = "executing"
    query_id: str
    question: str
    sql: str


class ResultEvent(_Event):
    type: Literal["result"] = "result"
    query_id: str
    columns: list[str]
    rows: list[list[Any]]  # a preview, JSON-safe, within the event's byte budget
    row_count: int
    has_more: bool
    error: str | None
    hint: str | None
    elapsed_ms: int
    reused_from: str | None = None
    error_code: int | None = None

    @classmethod
    def of(cls, query: ExecutedQuery, *, max_bytes: int) -> ResultEvent:
        """The query's result as a person sees it: up to PREVIEW_ROWS rows, fewer when they would take
        the event past `max_bytes`."""
        result = query.result
        event = cls(
            query_id=query.id,
            columns=result.columns,
            rows=[],
            row_count=result.row_count,
            has_more=result.has_more,
            error=result.error,
            hint=result.hint,
            elapsed_ms=result.elapsed_ms,
            reused_from=query.reused_from,
            error_code=result.error_code,
        )
        event.rows = fit_rows(result.json_rows(PREVIEW_ROWS), max_bytes - json_size(event.wire()))
        return event


class AnswerEvent(_Event):
    """A piece of the answer as it is generated. `restart` says: discard the text so far (the
    model turned out to be calling tools, or a stream was retried)."""

    type: Literal["answer"] = "answer"
    text: str
    restart: bool = False


class FollowupsEvent(_Event):
    type: Literal["followups"] = "followups"
    questions: list[str]


class ChartEvent(_Event):
    """A chart drawn from a query's full result (a Vega-Lite spec)."""

    type: Literal["chart"] = "chart"
    chart: Chart


class FallbackEvent(_Event):
    """The run goes on with the next model in its list: the one before was overloaded, rate limited or
    unreachable. What was gathered so far stays; `note` is a short line to show."""

    type: Literal["fallback"] = "fallback"
    from_model: str
    to_model: str
    reason: str  # overloaded, rate_limited, unavailable
    note: str


class ErrorEvent(_Event):
    type: Literal["error"] = "error"
    message: str


class StepEvent(_Event):
    """A report's live plan: one step of its loop (a model round and the tools it called), sent when the
    step starts its tools (`running`) and again when they are done (`done`), with what the report has
    spent of its budget so far. Answers send none."""

    type: Literal["step"] = "step"
    number: int  # 1, 2, ... across the report (a Resume goes on from the last)
    title: str  # what the step does, in words (its think, else its queries' questions)
    state: Literal["running", "done"]
    queries: list[str] = Field(default_factory=list)  # the Q ids it ran
    used: ReportUsage
    budget: ReportBudget


class FinalAnswer(BaseModel):
    """What the `done` event carries on the wire: the answer and how the run ended. Queries and charts
    went out as their own events (`executing`, `result`, `chart`), once each."""

    question: str
    answer: str
    classification: Classification
    outcome: Outcome
    cancelled: bool
    error: str | None
    followups: list[str]
    metrics: RunMetrics
    model: str = ""
    figures: FigureReport | None = None
    receipt: Receipt | None = None
    report: ReportStatus | None = None  # a report run's: the whole report is in the kit's store (chats/reports.py)
    resumed: int = 0

    @classmethod
    def of(cls, result: RunResult) -> FinalAnswer:
        final = cls.model_validate(result.model_dump(include=set(cls.model_fields) - {"report"}))
        final.report = result.report.status() if result.report is not None else None
        return final


def fit_rows(rows: list[list[Any]], max_bytes: int) -> list[list[Any]]:
    """The first rows that fit in `max_bytes` of JSON."""
    kept, used = [], 2
    for row in rows:
        used += json_size(row) + 1
        if used > max_bytes:
            break
        kept.append(row)
    return kept


# The Runner's events: progress only. How a run ended is what `run()` returns; the run registry
# (chats/runs.py) publishes it, once, as `done` after the turn is stored.
Progress = (
    ThinkingEvent
    | ExecutingEvent
    | ResultEvent
    | ChartEvent
    | AnswerEvent
    | FollowupsEvent
    | FallbackEvent
    | ErrorEvent
    | StepEvent
)
Event = Annotated[Progress, Field(discriminator="type")]


# --- the events of a run as adapters, the store and other workers see them ---


class StartedEvent(_Event):
    """The first event of every run, before the model's first reply."""

    type: Literal["started"] = "started"
    question: str


class FinishedEvent(_Event):
    """The last event of every run: what a person sees of the result (None: the run failed on the
    server before it had one). Built in one place, the run registry's `finished` (chats/runs.py)."""

    type: Literal["done"] = "done"
    result: FinalAnswer | None


WireEvent = Annotated[StartedEvent | Progress | FinishedEvent, Field(discriminator="type")]
WIRE_EVENT: TypeAdapter[WireEvent] = TypeAdapter(WireEvent)
EventSink = Callable[[Event], Awaitable[None]]


# --- durable runs ---

CHECKPOINT_VERSION: Literal[2] = 2  # 2: its stored form holds each result once (agent/checkpoint_form.py)


class ModelCalls(BaseModel):
    """One model's calls and tokens so far, for the receipt."""

    model: str
    calls: int
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


class Checkpoint(BaseModel):
    """A run's progress at a round's end: what `run(..., resume=)` needs to go on at the next round, in
    another process too, running no query again. `model_dump(mode="json")` is its stored form, which holds
    each query result once (agent/checkpoint_form.py; a store writes it in parts, `of_parts` reads them
    back); a stored one of a `version` this release does not know is not to be resumed
    (`Checkpoint.model_validate` refuses it). Version 1 (results twice) still reads.

    `rounds` is the model rounds completed (0: none yet, taken when the run starts); `messages` every message
    the next model call is sent (the history the run was given included, so a resume needs no history);
    `turn_start` the index of the question's own message in them; `result_chars` the cap the model was sent
    each result's text at (0: unknown; the stored form then keeps those texts as they are)."""

    version: Literal[1, 2] = CHECKPOINT_VERSION
    question: str
    policy: str | None = None  # the name of the policy it runs under; a resume must pass the same
    rounds: int = 0
    messages: list[dict[str, Any]] = Field(default_factory=list, repr=False)
    turn_start: int = 0
    queries: list[ExecutedQuery] = Field(default_factory=list)
    charts: list[Chart] = Field(default_factory=list)
    thinking: list[str] = Field(default_factory=list)
    answer: str = ""  # an answer a correction round sent back (the next round replaces it)
    metrics: RunMetrics = Field(default_factory=RunMetrics)
    model_calls: list[ModelCalls] = Field(default_factory=list)  # the receipt's accumulator
    model: str = ""
    query_ids_taken: int = 0  # the Q-number counter: the next query is Q<query_ids_taken + 1>
    executions_claimed: int = 0
    charts_claimed: int = 0
    think_only_rounds: int = 0
    citation_retries: int = 0
    figures_corrected: bool = False
    unverified_before_correction: int = 0
    started_at: float = 0.0  # wall-clock start (time.time()): a resumed run's times include the takeover
    first_event_ms: int | None = None
    resumed: int = 0  # times resumed before this checkpoint was taken
    result_chars: int = 0

    @model_serializer(mode="wrap")
    def _results_once(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        stored: dict[str, Any] = handler(self)
        if "messages" in stored:
            stored["messages"] = with_references(stored["messages"], self._result_texts())
        if "queries" in stored:
            stored["queries"] = reused_once(stored["queries"])
        return stored

    @model_validator(mode="before")
    @classmethod
    def _reused_results(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("queries"), list):
            return {**data, "queries": reused_restored(data["queries"])}
        return data

    @model_validator(mode="after")
    def _rendered_results(self) -> Checkpoint:
        if has_references(self.messages):
            self.messages = without_references(self.messages, self._result_texts())
        return self

    def _result_texts(self) -> dict[str, str]:
        """Each query's result as the model was sent it, by query id."""
        if self.result_chars <= 0:
            return {}
        return {query.id: format_for_model(query.result, self.result_chars) for query in self.queries}

    @classmethod
    def of_parts(cls, parts: Iterable[CheckpointPart]) -> Checkpoint | None:
        """The checkpoint its store's parts make (agent/checkpoint_form.py); None for none. ValueError (a
        pydantic ValidationError too) when they do not make one this release can read."""
        form = fold(parts)
        return None if form is None else cls.model_validate(form)


CheckpointSink = Callable[[Checkpoint], Awaitable[None]]


async def ignore_events(event: Event) -> None:
    return None


class Runner(Protocol):
    async def run(
        self,
        question: str,
        *,
        history: Sequence[Turn] = (),
        platform: Platform = "cli",
        interface: Interface = "cli",
        on_event: EventSink = ignore_events,
        followups: bool = True,
        policy: Policy | None = None,
        checkpoint: CheckpointSink | None = None,
        resume: Checkpoint | None = None,
        report: ReportRequest | None = None,
    ) -> RunResult:
        """Answer one question, emitting its progress as it happens; returns how it ended (a cancelled run
        returns its partial result, marked cancelled). No event says it ended: the caller says so.
        Every query it runs reads only `policy`'s tables and rows (None: everything in scope); the
        result names the policy, so a later re-run of one of its queries can run under it again.

        `checkpoint` is given the run's progress when it starts and after every completed round (a sink
        that fails is logged; the run goes on). `resume` goes on from such a checkpoint at its next round
        (`history` is then unused: the checkpoint holds the messages); the question and policy must be
        the checkpoint's, or ValueError. Events continue from there; a reader's partial answer text from
        before is the caller's to discard.

        With `report`, the run writes a report (`RunResult.report`) within that request's budget, its steps
        sent as `StepEvent`s; without it, an answer. Only an explicit request makes a report."""
        ...
